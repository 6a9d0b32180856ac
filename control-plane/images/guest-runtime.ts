// envd's runtime, self-contained: what goes under /opt/locale2b in every
// guest image. The server's Node binary, the envd bundle, and every shared
// library Node and envd's native modules (node-pty, xattr) load: glibc's
// loader, libc, libm, libstdc++, libgcc_s, ... as `ldd` finds them on this
// host. The copies of Node and of the .node files are patched (patchelf) to
// use that loader (PT_INTERP /opt/locale2b/lib/ld-linux-x86-64.so.2) and
// those libraries (DT_RPATH /opt/locale2b/lib), so envd runs the same on a
// Debian image, a musl one (alpine) or one with no C library at all.
// DT_RPATH, not DT_RUNPATH: glibc searches the executable's RPATH for what
// is loaded later too (dlopen of a native module and of its libraries). Only
// these copies are patched: the programs envd starts are the image's own and
// load the image's own libraries.
//
// Cached under <imagesDir>/runtime/<hash16>/tree, laid out as /opt/locale2b
// (node/bin/node, envd/, lib/), keyed by the Node binary, the libraries'
// contents, the bundle and this recipe; the guest gets a copy of the tree.
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { chmod, copyFile, mkdir, readdir, readFile, realpath, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import { basename, join, posix } from "node:path";
import type { EnvdBundle } from "./envd-bundle.js";
import { GUEST } from "./layout.js";
import { BuildSetupError, mustRun } from "./template-exec.js";
import { guestMkdir, guestPath, removeTree } from "./template-fs.js";
import { findExecutable } from "../host/executables.js";

/** Bumped when what goes into the tree, or how it is patched, changes: part of the key. */
export const GUEST_RUNTIME_VERSION = 1;
/** How many runtime trees the cache keeps (the most recently used; each holds a Node binary, ~100 MB). */
const KEEP = 3;

export interface SharedLibraries {
  /** The dynamic loader's host path (undefined: nothing here is dynamically linked). */
  loader: string | undefined;
  /** Library name as the binaries ask for it (libc.so.6) → its file on this host. */
  libs: Map<string, string>;
}

export interface GuestRuntime {
  /** The tree to copy to GUEST.root. */
  tree: string;
  hash16: string;
  cached: boolean;
  /** The names under GUEST.lib. */
  libs: string[];
}

/** ldd of one binary: `name => /path (addr)` lines, the loader as `/path (addr)`; a static one lists nothing. */
async function ldd(file: string): Promise<SharedLibraries> {
  const out = await new Promise<{ code: number | null; text: string }>((resolve, reject) => {
    const child = spawn("ldd", [file], { stdio: ["ignore", "pipe", "pipe"], env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LC_ALL: "C" } });
    let text = "";
    child.stdout.on("data", (d: Buffer) => (text += d.toString()));
    child.stderr.on("data", (d: Buffer) => (text += d.toString()));
    child.once("error", (err) => reject(new BuildSetupError(`cannot run ldd to find what ${file} loads: ${err.message}`)));
    child.once("close", (code) => resolve({ code, text }));
  });
  const found: SharedLibraries = { loader: undefined, libs: new Map() };
  if (/not a dynamic executable|statically linked/.test(out.text)) return found;
  if (out.code !== 0) throw new Error(`ldd ${file} exited ${out.code}: ${out.text.trim().slice(-500)}`);
  for (const raw of out.text.split("\n")) {
    const line = raw.trim();
    let m = /^(\S+) => not found$/.exec(line);
    if (m) throw new Error(`${file} needs ${m[1]}, which is not on this host`);
    m = /^(\S+) => (\/\S+) \(0x[0-9a-f]+\)$/.exec(line);
    if (m) {
      found.libs.set(m[1]!, m[2]!);
      continue;
    }
    m = /^(\/\S+) \(0x[0-9a-f]+\)$/.exec(line);
    if (m) found.loader = m[1]!;
  }
  return found;
}

/** Every library `files` load (with what those load), and the loader they share. */
export async function sharedLibraries(files: string[]): Promise<SharedLibraries> {
  const all: SharedLibraries = { loader: undefined, libs: new Map() };
  for (const f of files) {
    const one = await ldd(f);
    if (one.loader) {
      if (all.loader && all.loader !== one.loader) throw new Error(`${f} uses the loader ${one.loader}, others ${all.loader}`);
      all.loader = one.loader;
    }
    for (const [name, path] of one.libs) all.libs.set(name, path);
  }
  // The loader is the interpreter, not a library of the tree's own (node also asks for it by name).
  if (all.loader) all.libs.delete(basename(all.loader));
  return all;
}

/** The bundle's native modules (*.node), relative to its folder. */
async function nativeModules(dir: string, rel = ""): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(join(dir, rel), { withFileTypes: true })) {
    const r = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await nativeModules(dir, r)));
    else if (e.isFile() && e.name.endsWith(".node")) out.push(r);
  }
  return out.sort();
}

async function sha256(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/** sha256 of the Node binary, remembered in the images dir by path, size, mtime and inode (hashing 100 MB takes ~0.4 s). */
export async function nodeBinaryHash(node: string, imagesDir: string): Promise<string> {
  const st = await stat(node);
  const key = `${node}:${st.size}:${st.mtimeMs}:${st.ino}`;
  const memo = join(imagesDir, "node-hash.json");
  try {
    const m = JSON.parse(await readFile(memo, "utf8")) as { key?: string; sha256?: string };
    if (m.key === key && m.sha256) return m.sha256;
  } catch {
    // first time
  }
  const digest = await sha256(node);
  await mkdir(imagesDir, { recursive: true });
  const tmp = `${memo}.tmp-${process.pid}`;
  await writeFile(tmp, `${JSON.stringify({ key, sha256: digest })}\n`);
  await rename(tmp, memo);
  return digest;
}

interface Plan {
  hash16: string;
  found: SharedLibraries;
  natives: string[];
}

/** What the tree is made of, and its key (no patchelf needed: a cached image's key is known without it). */
async function plan(imagesDir: string, bundle: EnvdBundle, node: string): Promise<Plan> {
  const natives = await nativeModules(bundle.dir);
  const found = await sharedLibraries([node, ...natives.map((n) => join(bundle.dir, n))]);
  const h = createHash("sha256");
  h.update(JSON.stringify({ v: GUEST_RUNTIME_VERSION, root: GUEST.root, node: await nodeBinaryHash(node, imagesDir), envd: bundle.hash16 }));
  if (found.loader) h.update(`\0loader\0${basename(found.loader)}\0${await sha256(found.loader)}`);
  for (const name of [...found.libs.keys()].sort()) h.update(`\0lib\0${name}\0${await sha256(found.libs.get(name)!)}`);
  return { hash16: h.digest("hex").slice(0, 16), found, natives };
}

/** The key of the runtime tree for this host's Node and libraries and `bundle` (part of every image's hash). */
export async function guestRuntimeHash(imagesDir: string, bundle: EnvdBundle, node = process.execPath): Promise<string> {
  return (await plan(imagesDir, bundle, node)).hash16;
}

const inFlight = new Map<string, Promise<GuestRuntime>>();

/** The runtime tree for this host's Node and `bundle`, made (with patchelf) unless cached. */
export async function ensureGuestRuntime(imagesDir: string, bundle: EnvdBundle, o: { node?: string; log?: (line: string) => void } = {}): Promise<GuestRuntime> {
  const p = await plan(imagesDir, bundle, o.node ?? process.execPath);
  const dir = join(imagesDir, "runtime", p.hash16);
  const tree = join(dir, "tree");
  if (existsSync(join(dir, "runtime.json"))) {
    const now = new Date();
    await utimes(dir, now, now).catch(() => undefined); // recently used: kept by the pruning
    return { tree, hash16: p.hash16, cached: true, libs: (JSON.parse(await readFile(join(dir, "runtime.json"), "utf8")) as { libs: string[] }).libs };
  }
  let made = inFlight.get(dir);
  if (!made) {
    made = make(imagesDir, bundle, o.node ?? process.execPath, p, o.log).finally(() => inFlight.delete(dir));
    inFlight.set(dir, made);
  }
  return made;
}

async function make(imagesDir: string, bundle: EnvdBundle, node: string, p: Plan, log?: (line: string) => void): Promise<GuestRuntime> {
  const patchelf = findExecutable("patchelf");
  if (!patchelf && p.found.loader) throw new BuildSetupError("patchelf not found: envd's Node is patched to use its own libraries in every image (apt-get install patchelf, or scripts/setup-host)");
  const parent = join(imagesDir, "runtime");
  await mkdir(parent, { recursive: true });
  const tmp = join(parent, `.tmp-${p.hash16}-${process.pid}-${randomBytes(3).toString("hex")}`);
  const tree = join(tmp, "tree");
  const rel = (guest: string) => join(tree, posix.relative(GUEST.root, guest));
  try {
    await mkdir(rel(posix.dirname(GUEST.node)), { recursive: true });
    await mkdir(rel(GUEST.lib), { recursive: true });
    await copyFile(node, rel(GUEST.node));
    await chmod(rel(GUEST.node), 0o755);
    await mustRun("copy the envd bundle", "cp", ["-a", "--", bundle.dir, rel(posix.dirname(GUEST.envd))]);
    const libs: string[] = [];
    for (const [name, host] of [...p.found.libs, ...(p.found.loader ? [[basename(p.found.loader), p.found.loader] as const] : [])]) {
      const dest = join(rel(GUEST.lib), name);
      await copyFile(await realpath(host), dest);
      await chmod(dest, 0o755);
      libs.push(name);
    }
    if (p.found.loader && patchelf) {
      const loader = posix.join(GUEST.lib, basename(p.found.loader));
      await mustRun("patch envd's Node", patchelf, ["--set-interpreter", loader, "--set-rpath", GUEST.lib, "--force-rpath", rel(GUEST.node)]);
      for (const n of p.natives) await mustRun(`patch ${n}`, patchelf, ["--set-rpath", GUEST.lib, "--force-rpath", join(rel(posix.dirname(GUEST.envd)), n)]);
    }
    await mustRun("own envd's runtime", "chown", ["-R", "-h", "0:0", tree]);
    libs.sort();
    await writeFile(
      join(tmp, "runtime.json"),
      `${JSON.stringify({ hash16: p.hash16, node: process.version, envdBundle: bundle.hash16, loader: p.found.loader ?? null, libs, builtAt: new Date().toISOString() }, null, 2)}\n`,
    );
    const dir = join(parent, p.hash16);
    try {
      await rename(tmp, dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!((code === "ENOTEMPTY" || code === "EEXIST") && existsSync(join(dir, "runtime.json")))) throw err;
      // Another process made the same tree first: use theirs.
    }
    log?.(`envd's runtime ${p.hash16}: node ${process.version} + ${libs.join(", ")}`);
    await prune(parent, p.hash16).catch((err: Error) => log?.(`pruning ${parent}: ${err.message}`));
    return { tree: join(dir, "tree"), hash16: p.hash16, cached: false, libs };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Keeps the KEEP most recently used trees (and `keep`); a day-old grace for what a concurrent build may be copying. */
async function prune(parent: string, keep: string): Promise<void> {
  const names = (await readdir(parent)).filter((n) => /^[0-9a-f]{16}$/.test(n));
  const byUse = await Promise.all(names.map(async (n) => ({ n, t: (await stat(join(parent, n))).mtimeMs })));
  byUse.sort((a, b) => b.t - a.t);
  for (const { n, t } of byUse.slice(KEEP)) {
    if (n !== keep && Date.now() - t > 24 * 3600_000) await rm(join(parent, n), { recursive: true, force: true });
  }
}

/**
 * Puts the runtime into a root: whatever was at GUEST.root (an older
 * runtime, or what an image or a build put there) goes, the tree is copied
 * in, owned by root.
 */
export async function installGuestRuntime(rootfs: string, runtime: GuestRuntime): Promise<void> {
  // The last component is never followed: a link the image has there is removed, not its target.
  await removeTree(await guestPath(rootfs, GUEST.root));
  const dest = await guestMkdir(rootfs, GUEST.root);
  await mustRun("copy envd's runtime", "cp", ["-a", "--reflink=auto", "--", `${runtime.tree}/.`, dest]);
}
