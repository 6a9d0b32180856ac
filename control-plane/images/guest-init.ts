// The guest init (`/sbin/locale2b-init`): a small static C program in
// rootfs/init/ that is PID 1 in a VM (mounts, clock, hostname, reaping,
// poweroff), supervises envd and bridges AF_VSOCK port 49983 (or, in the
// process runtime, a hybrid-vsock Unix socket) to envd's Unix socket.
// This module compiles it once per source version into the image cache.
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, readFile, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { packageRoot } from "../runtimes/paths.js";

/** Compiler flags; part of the cache key. */
export const INIT_CFLAGS = ["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-s"] as const;

const MISSING_TOOLCHAIN = "install gcc and libc6-dev (scripts/setup-host)";

/** rootfs/init in this package (works from source and from dist/). */
export function initSourceDir(): string {
  return join(packageRoot(), "rootfs", "init");
}

interface Sources {
  dir: string;
  files: string[];
  hash16: string;
}

async function readSources(dir: string): Promise<Sources> {
  let names: string[];
  try {
    names = (await readdir(dir)).filter((n) => n.endsWith(".c") || n.endsWith(".h")).sort();
  } catch (err) {
    throw new Error(`C sources not found at ${dir}: ${(err as Error).message}`);
  }
  if (!names.some((n) => n.endsWith(".c"))) throw new Error(`no C sources (*.c) in ${dir}`);
  const h = createHash("sha256");
  for (const flag of INIT_CFLAGS) h.update(`flag\0${flag}\0`);
  for (const name of names) {
    const body = await readFile(join(dir, name));
    h.update(`file\0${name}\0${body.length}\0`);
    h.update(body);
  }
  return { dir, files: names.filter((n) => n.endsWith(".c")).map((n) => join(dir, n)), hash16: h.digest("hex").slice(0, 16) };
}

function run(file: string, args: string[], cwd: string): Promise<{ code: number | null; stderr: string; error?: NodeJS.ErrnoException }> {
  return new Promise((resolve) => {
    execFile(file, args, { cwd, maxBuffer: 16 * 1024 * 1024 }, (error, _stdout, stderr) => {
      if (error && (error as NodeJS.ErrnoException).code === "ENOENT" && !stderr) {
        resolve({ code: null, stderr: "", error: error as NodeJS.ErrnoException });
        return;
      }
      resolve({ code: error ? ((error as { code?: unknown }).code as number | null) ?? 1 : 0, stderr: String(stderr) });
    });
  });
}

/** Does the compiler's complaint say the toolchain (not our code) is incomplete? */
function toolchainMissing(stderr: string): boolean {
  return /cannot find -l(c|pthread)\b|cannot find (crt1|crti|crtn)\.o|fatal error: [\w/.-]+\.h: No such file/.test(stderr);
}

const inFlight = new Map<string, Promise<string>>();

/**
 * The guest init binary for the current sources, compiled on first use into
 * `<imagesDir>/init/<hash16>/locale2b-init` (hash16: sha256 of the sources
 * and the compiler flags). Built in a temporary directory and renamed into
 * place, so a directory that exists is complete; returns at once when it does.
 */
export function ensureInitBinary(imagesDir: string, log?: (line: string) => void): Promise<string> {
  return ensureCompiled({ sourceDir: initSourceDir(), cacheDir: join(imagesDir, "init"), binaryName: "locale2b-init", what: "the guest init" }, log);
}

/** A static C program (every *.c of `sourceDir`), compiled once per source version into `<cacheDir>/<hash16>/<binaryName>`. */
export interface CompiledProgram {
  sourceDir: string;
  cacheDir: string;
  binaryName: string;
  /** For messages: "the guest init". */
  what: string;
}

/** The program's binary for the current sources, built on first use (see ensureInitBinary). */
export async function ensureCompiled(prog: CompiledProgram, log?: (line: string) => void): Promise<string> {
  const src = await readSources(prog.sourceDir);
  const finalDir = join(prog.cacheDir, src.hash16);
  const binary = join(finalDir, prog.binaryName);
  if (existsSync(binary)) return binary;
  let p = inFlight.get(binary);
  if (!p) {
    p = build(src, prog, finalDir, binary, log).finally(() => inFlight.delete(binary));
    inFlight.set(binary, p);
  }
  return p;
}

async function build(src: Sources, prog: CompiledProgram, finalDir: string, binary: string, log?: (line: string) => void): Promise<string> {
  const parent = prog.cacheDir;
  await mkdir(parent, { recursive: true });
  const tmp = join(parent, `.tmp-${src.hash16}-${process.pid}-${randomBytes(4).toString("hex")}`);
  await mkdir(tmp);
  try {
    const out = join(tmp, prog.binaryName);
    const cc = process.env.CC || "gcc";
    log?.(`building ${prog.what} ${src.hash16} (${cc} ${INIT_CFLAGS.join(" ")})`);
    const started = Date.now();
    const r = await run(cc, [...INIT_CFLAGS, "-o", out, ...src.files], tmp);
    if (r.error) throw new Error(`cannot build ${prog.what}: ${cc} not found: ${MISSING_TOOLCHAIN}`);
    if (r.code !== 0) {
      const detail = r.stderr.trim().split("\n").slice(-20).join("\n");
      if (toolchainMissing(r.stderr)) throw new Error(`cannot build ${prog.what}: static libc or headers missing: ${MISSING_TOOLCHAIN}\n${detail}`);
      throw new Error(`cannot build ${prog.what} (${cc} exited ${r.code}):\n${detail}`);
    }
    await chmod(out, 0o755);
    try {
      await rename(tmp, finalDir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Someone else finished the same build first: theirs is as good as ours.
      if ((code === "ENOTEMPTY" || code === "EEXIST") && existsSync(binary)) return binary;
      throw err;
    }
    const { size } = await stat(binary);
    log?.(`built ${prog.what} ${src.hash16} in ${Date.now() - started} ms (${size} bytes)`);
    return binary;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}
