// The envd bundle that goes into every guest image at dirname(GUEST.envd):
// envd/cli.ts bundled by esbuild into one CommonJS file, envd-main.cjs, with
// the V8 code cache of its start-up (envd-main.cjs.cache, made by running it
// once here) and the loader that uses it as envd.js (envd/loader.ts); the
// native modules (node-pty, xattr) beside them in node_modules/. Cached under
// <imagesDir>/envd/<hash16>/, keyed by the sources that go into it.
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, cp, mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { createInterface } from "node:readline";
import { packageRoot } from "../runtimes/paths.js";
import { ENVD_CODE_CACHE, ENVD_LOADER, ENVD_MAIN, ENVD_MAIN_HEAD, ENVD_MAIN_TAIL } from "../../envd/loader.js";
import { GUEST } from "./layout.js";

/** Bumped when the bundling recipe changes: part of the cache key. */
export const ENVD_BUNDLE_VERSION = 2;
/** Packages with native code: not bundled, copied with their platform packages. */
export const NATIVE_PACKAGES = ["@lydell/node-pty", "@napi-rs/xattr"] as const;
/** Folders whose .ts files may go into the bundle (relative to the package root). */
const SOURCE_DIRS = ["envd", "gen/ts"];
const SOURCE_FILES = ["package-lock.json"];
/** Bundled modules must come from these (or node_modules); anything else is a mistake. */
const ALLOWED_INPUTS = [...SOURCE_DIRS.map((d) => `${d}/`), ...SOURCE_FILES];
const FORBIDDEN_PACKAGES = ["node-sqlite3-wasm", "esbuild", "yaml", "vitest"];

const BANNER = [
  "// locale2b envd bundle (control-plane/images/envd-bundle.ts); entry: envd/cli.ts, started by envd.js",
  'const __locale2bImportMetaUrl = require("node:url").pathToFileURL(__filename).href;',
].join("\n");

/** How long the run that makes the code cache may take to answer /health and exit. */
const CODE_CACHE_RUN_MS = 30_000;

export interface EnvdBundle {
  /** The bundle folder: envd.js (the loader), envd-main.cjs (+ .cache), package.json, node_modules/. */
  dir: string;
  entry: string;
  hash16: string;
  cached: boolean;
  /** Bytes of the bundled envd (envd-main.cjs). */
  bytes: number;
}

async function listTs(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await listTs(p)));
    else if (e.isFile() && e.name.endsWith(".ts") && !e.name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

/** sha256 (hex) of everything that decides the bundle: the sources, the lock file, esbuild's version, this recipe. */
export async function envdSourcesHash(root = packageRoot()): Promise<string> {
  const files = [...(await Promise.all(SOURCE_DIRS.map((d) => listTs(join(root, d))))).flat(), ...SOURCE_FILES.map((f) => join(root, f))];
  const h = createHash("sha256");
  h.update(`bundle\0${ENVD_BUNDLE_VERSION}\0esbuild\0${await esbuildVersion(root)}\0${process.platform}-${process.arch}\0`);
  for (const f of files.map((f) => relative(root, f).split(sep).join("/")).sort()) {
    const body = await readFile(join(root, f));
    h.update(`file\0${f}\0${body.length}\0`);
    h.update(body);
  }
  return h.digest("hex");
}

async function esbuildVersion(root: string): Promise<string> {
  try {
    return (JSON.parse(await readFile(join(root, "node_modules", "esbuild", "package.json"), "utf8")) as { version: string }).version;
  } catch {
    throw new Error("esbuild is not installed: run 'npm ci' (the envd bundle needs it)");
  }
}

const inFlight = new Map<string, Promise<EnvdBundle>>();

/** The bundle for the current sources, built into the cache unless it is there already. */
export async function ensureEnvdBundle(imagesDir: string, opts: { force?: boolean; log?: (line: string) => void } = {}): Promise<EnvdBundle> {
  const root = packageRoot();
  if (!existsSync(join(root, "envd", "cli.ts"))) throw new Error(`envd sources not found under ${root}: the envd bundle is built from a source checkout`);
  const hash16 = (await envdSourcesHash(root)).slice(0, 16);
  const dir = join(imagesDir, "envd", hash16);
  const entry = join(dir, "envd.js");
  if (opts.force && existsSync(dir)) await rm(dir, { recursive: true, force: true });
  if (existsSync(entry)) return { dir, entry, hash16, cached: true, bytes: (await stat(join(dir, ENVD_MAIN))).size };
  let p = inFlight.get(dir);
  if (!p) {
    p = buildBundle(root, imagesDir, hash16, opts.log).finally(() => inFlight.delete(dir));
    inFlight.set(dir, p);
  }
  return p;
}

async function buildBundle(root: string, imagesDir: string, hash16: string, log?: (line: string) => void): Promise<EnvdBundle> {
  const esbuild = await import("esbuild");
  const parent = join(imagesDir, "envd");
  const dir = join(parent, hash16);
  await mkdir(parent, { recursive: true });
  const tmp = join(parent, `.tmp-${hash16}-${process.pid}-${randomBytes(3).toString("hex")}`);
  await mkdir(tmp);
  try {
    const result = await esbuild.build({
      absWorkingDir: root,
      entryPoints: [join(root, "envd", "cli.ts")],
      outfile: join(tmp, ENVD_MAIN),
      bundle: true,
      platform: "node",
      target: "node20",
      format: "cjs",
      banner: { js: BANNER },
      define: { "import.meta.url": "__locale2bImportMetaUrl" },
      external: NATIVE_PACKAGES.flatMap((p) => [p, `${p}/*`, `${p}-*`]),
      minifySyntax: true,
      minifyWhitespace: true,
      legalComments: "none",
      metafile: true,
      logLevel: "silent",
    });
    for (const w of result.warnings) log?.(`esbuild: ${w.text}${w.location ? ` (${w.location.file}:${w.location.line})` : ""}`);
    checkInputs(Object.keys(result.metafile.inputs));
    await writeFile(join(tmp, "package.json"), `${JSON.stringify({ name: "locale2b-envd", private: true, type: "commonjs", main: "envd.js" }, null, 2)}\n`);
    // Wrapped once here, so the loader compiles the file as it reads it (the entry's `#!` line goes).
    const body = (await readFile(join(tmp, ENVD_MAIN), "utf8")).replace(/^#![^\n]*\n/, "");
    await writeFile(join(tmp, ENVD_MAIN), ENVD_MAIN_HEAD + body + ENVD_MAIN_TAIL);
    await writeFile(join(tmp, "envd.js"), ENVD_LOADER);
    await chmod(join(tmp, "envd.js"), 0o755);
    const copied = await copyNativePackages(root, join(tmp, "node_modules"));
    const codeCache = await makeCodeCache(tmp).catch((err: Error) => {
      log?.(`envd bundle: no code cache (${err.message}); envd compiles at each start instead`);
      return 0;
    });
    await writeFile(
      join(tmp, "bundle.json"),
      `${JSON.stringify({ hash16, builtAt: new Date().toISOString(), inputs: Object.keys(result.metafile.inputs).length, native: copied, codeCacheBytes: codeCache, node: process.version }, null, 2)}\n`,
    );
    try {
      await rename(tmp, dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!((code === "ENOTEMPTY" || code === "EEXIST") && existsSync(join(dir, "envd.js")))) throw err;
      // Another build finished the same bundle first: use theirs.
    }
    const entry = join(dir, "envd.js");
    const bytes = (await stat(join(dir, ENVD_MAIN))).size;
    log?.(`bundled envd ${hash16}: ${ENVD_MAIN} ${Math.round(bytes / 1024)} KiB, code cache ${Math.round(codeCache / 1024)} KiB + ${copied.join(", ")}`);
    return { dir, entry, hash16, cached: false, bytes };
  } catch (err) {
    const errors = (err as { errors?: Array<{ text: string; location?: { file: string; line: number } | null }> }).errors;
    if (errors?.length) {
      throw new Error(`bundling envd failed:\n${errors.map((e) => `  ${e.location ? `${e.location.file}:${e.location.line}: ` : ""}${e.text}`).join("\n")}`);
    }
    throw err;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/**
 * Runs the bundle in `dir` once (as a sandbox does: GUEST.nodeFlags, the
 * loader) until it answers /health, then stops it, and keeps the V8 code
 * cache the loader writes at its exit: what envd compiled for its start-up
 * and its first request. Returns its size.
 */
async function makeCodeCache(dir: string): Promise<number> {
  const out = join(dir, `${ENVD_CODE_CACHE}.tmp`);
  const child = spawn(process.execPath, [...GUEST.nodeFlags, join(dir, "envd.js"), "--listen", "tcp://127.0.0.1:0"], {
    cwd: dir,
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, LOCALE2B_ENVD_CODE_CACHE_OUT: out, LOCALE2B_LOG_LEVEL: "info" },
  });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const timer = setTimeout(() => child.kill("SIGKILL"), CODE_CACHE_RUN_MS);
  try {
    const url = await new Promise<string>((resolve, reject) => {
      // envd logs on stderr, one JSON object per line.
      const lines = createInterface({ input: child.stderr! });
      lines.on("line", (line) => {
        try {
          const rec = JSON.parse(line) as { msg?: string; addresses?: string[] };
          if (rec.msg === "envd listening" && rec.addresses?.[0]) resolve(rec.addresses[0].replace(/^tcp:/, "http:"));
        } catch {
          // not a log line
        }
      });
      void exited.then((code) => reject(new Error(`envd exited (${code}) before it listened: ${stderr.trim()}`)));
    });
    const res = await fetch(`${url}/health`);
    if (res.status !== 204) throw new Error(`envd answered /health with ${res.status}`);
    child.kill("SIGTERM");
    const code = await exited;
    if (code !== 0) throw new Error(`envd exited ${code} when stopped: ${stderr.trim()}`);
    await rename(out, join(dir, ENVD_CODE_CACHE));
    return (await stat(join(dir, ENVD_CODE_CACHE))).size;
  } finally {
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await rm(out, { force: true });
  }
}

/** Fails when the bundle pulled in code that is not envd's (control plane, SQLite, build tools). */
export function checkInputs(inputs: string[]): void {
  const bad: string[] = [];
  for (const input of inputs) {
    const m = /(?:^|\/)node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
    if (m) {
      if (FORBIDDEN_PACKAGES.includes(m[1]!)) bad.push(input);
      continue;
    }
    if (!ALLOWED_INPUTS.some((a) => (a.endsWith("/") ? input.startsWith(a) : input === a))) bad.push(input);
  }
  if (bad.length) throw new Error(`the envd bundle must hold envd only, but it pulls in: ${bad.join(", ")}`);
}

/** Copies the native packages and the dependencies of theirs that are installed (the platform's binaries). */
async function copyNativePackages(root: string, dest: string): Promise<string[]> {
  const copied: string[] = [];
  const queue: string[] = [...NATIVE_PACKAGES];
  while (queue.length) {
    const name = queue.shift()!;
    if (copied.includes(name)) continue;
    const src = join(root, "node_modules", name);
    if (!existsSync(join(src, "package.json"))) {
      if ((NATIVE_PACKAGES as readonly string[]).includes(name)) throw new Error(`${name} is not installed: run 'npm ci'`);
      continue; // another platform's optional package
    }
    const pkg = JSON.parse(await readFile(join(src, "package.json"), "utf8")) as { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> };
    await mkdir(dirname(join(dest, name)), { recursive: true });
    await cp(src, join(dest, name), { recursive: true, dereference: true, filter: (s) => !/\.(d\.ts|md|map)$/.test(s) || s === src });
    copied.push(name);
    queue.push(...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.optionalDependencies ?? {}));
  }
  return copied;
}
