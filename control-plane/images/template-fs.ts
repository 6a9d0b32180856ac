// File-system helpers for building a root filesystem on the host: chroot
// with /proc mounted (and always unmounted), placing files inside the tree
// without following its symlinks out of it, and removing a tree that a
// crashed build may have left with mounts inside.
import { copyFile, chmod, chown, lstat, mkdir, readFile, readlink, rm, unlink, writeFile } from "node:fs/promises";
import { existsSync, readFileSync } from "node:fs";
import { join, posix, resolve, sep } from "node:path";
import { findExecutable } from "../host/executables.js";
import { chrootEnv, mustRun, runCommand, type RunOptions } from "./template-exec.js";

/** Mount points at or under `dir`, deepest first (from /proc/self/mountinfo). */
export function mountsUnder(dir: string): string[] {
  const root = resolve(dir);
  let info: string;
  try {
    info = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const line of info.split("\n")) {
    const field = line.split(" ")[4];
    if (!field) continue;
    const point = field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (point === root || point.startsWith(root + sep)) out.push(point);
  }
  return out.sort((a, b) => b.length - a.length);
}

export async function unmountAll(dir: string): Promise<void> {
  const umount = findExecutable("umount") ?? "umount";
  for (const point of mountsUnder(dir)) {
    const r = await runCommand(umount, [point]);
    if (r.code !== 0) await runCommand(umount, ["-l", point]); // busy: detach now, it goes when released
  }
  const left = mountsUnder(dir);
  if (left.length) throw new Error(`cannot unmount ${left.join(", ")}`);
}

/** rm -rf that first unmounts anything under the tree and never crosses into another file system. */
export async function removeTree(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  await unmountAll(dir);
  const r = await runCommand("rm", ["-rf", "--one-file-system", "--", dir]);
  if (r.code !== 0 && existsSync(dir)) throw new Error(`cannot remove ${dir}: ${r.tail || `rm exited ${r.code}`}`);
}

const POLICY_RC = "/usr/sbin/policy-rc.d";

/**
 * Runs `fn` with the tree prepared for chroot commands: /proc mounted, the
 * host's resolv.conf in place (when the tree has none) and services kept
 * from starting; all undone afterwards, also when `fn` throws.
 */
export async function withChroot<T>(root: string, fn: (sh: (step: string, command: string, opts?: RunOptions) => Promise<string>) => Promise<T>): Promise<T> {
  const proc = join(root, "proc");
  const mount = findExecutable("mount") ?? "mount";
  const chroot = findExecutable("chroot") ?? "chroot";
  await mkdir(proc, { recursive: true });
  const undo: Array<() => Promise<void>> = [];
  try {
    await mustRun("mount /proc in the chroot", mount, ["-t", "proc", "proc", proc]);
    undo.push(() => unmountAll(proc));
    const resolv = await guestPath(root, "/etc/resolv.conf");
    if (!(await exists(resolv)) && existsSync("/etc/resolv.conf")) {
      await writeFile(resolv, await readFile("/etc/resolv.conf"));
      undo.push(() => rm(resolv, { force: true }));
    }
    const policy = await guestPath(root, POLICY_RC);
    if (!(await exists(policy))) {
      await writeFile(policy, "#!/bin/sh\n# locale2b template build: no services start in the chroot\nexit 101\n", { mode: 0o755 });
      undo.push(() => rm(policy, { force: true }));
    }
    return await fn((step, command, opts) => mustRun(step, chroot, [root, "/bin/sh", "-ec", command], { env: chrootEnv(), ...opts }));
  } finally {
    const errors: string[] = [];
    for (const u of undo.reverse()) await u().catch((err: Error) => errors.push(err.message));
    if (errors.length) throw new Error(`cleaning up the chroot at ${root}: ${errors.join("; ")}`);
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The host path of `guest` (absolute, inside the tree at `root`), following
 * symlinks the way the guest would see them (absolute targets are relative
 * to `root`), so nothing is written outside the tree. The last component is
 * not followed: callers replace it.
 */
export async function guestPath(root: string, guest: string): Promise<string> {
  const parts = posix.normalize(guest).split("/").filter(Boolean);
  if (!parts.length) throw new Error(`'${guest}' is not a file path`);
  const leaf = parts.pop()!;
  let dir: string[] = [];
  let hops = 0;
  const queue = [...parts];
  while (queue.length) {
    const part = queue.shift()!;
    if (part === "..") {
      dir.pop();
      continue;
    }
    if (part === ".") continue;
    const host = join(root, ...dir, part);
    let st;
    try {
      st = await lstat(host);
    } catch {
      dir.push(part); // does not exist yet: created by the caller
      continue;
    }
    if (st.isSymbolicLink()) {
      if (++hops > 40) throw new Error(`too many symlinks resolving ${guest} in ${root}`);
      const target = await readlink(host);
      if (target.startsWith("/")) dir = [];
      queue.unshift(...target.split("/").filter(Boolean));
      continue;
    }
    if (!st.isDirectory()) throw new Error(`${guest}: /${[...dir, part].join("/")} is not a directory in the image`);
    dir.push(part);
  }
  return join(root, ...dir, leaf);
}

/** mkdir -p of a guest directory, through the tree's own symlinks; returns its host path. */
export async function guestMkdir(root: string, guest: string, mode = 0o755, hops = 0): Promise<string> {
  if (posix.normalize(guest) === "/") return root;
  const host = await guestPath(root, guest);
  const st = await lstat(host).catch(() => undefined);
  if (st?.isSymbolicLink()) {
    if (hops > 40) throw new Error(`too many symlinks resolving ${guest} in ${root}`);
    return guestMkdir(root, posix.resolve(posix.dirname(guest), await readlink(host)), mode, hops + 1);
  }
  if (st && !st.isDirectory()) throw new Error(`${guest} is not a directory in the image`);
  if (!st) {
    await guestMkdir(root, posix.dirname(guest), mode, hops);
    await mkdir(host, { mode });
  }
  return host;
}

export interface GuestFile {
  content?: string | Uint8Array;
  /** A host file to copy. */
  from?: string;
  mode: number;
  uid?: number;
  gid?: number;
}

/**
 * Writes a file into the tree, replacing whatever is at that path (a
 * symlink included) by unlinking it first: never written through a link,
 * and never in place (a hard-linked copy of a cached layer stays intact).
 */
export async function writeGuestFile(root: string, guest: string, file: GuestFile): Promise<string> {
  const host = await guestPath(root, guest);
  await guestMkdir(root, posix.dirname(guest));
  const st = await lstat(host).catch(() => undefined);
  if (st?.isDirectory()) throw new Error(`${guest} is a directory in the image`);
  if (st) await unlink(host);
  if (file.from !== undefined) await copyFile(file.from, host);
  else await writeFile(host, file.content ?? "", { flag: "wx" });
  await chmod(host, file.mode);
  await chown(host, file.uid ?? 0, file.gid ?? 0);
  return host;
}

/**
 * Reads a file of the tree as the guest would (symlinks followed inside the
 * tree, absolute targets relative to `root`), never a host file: for trees a
 * sandbox made. Undefined when it is missing or not a regular file.
 */
export async function readGuestFile(root: string, guest: string): Promise<string | undefined> {
  let path = guest;
  for (let hops = 0; hops <= 40; hops++) {
    const host = await guestPath(root, path);
    const st = await lstat(host).catch(() => undefined);
    if (!st) return undefined;
    if (st.isSymbolicLink()) {
      path = posix.resolve(posix.dirname(path), await readlink(host));
      continue;
    }
    return st.isFile() ? readFile(host, "utf8") : undefined;
  }
  throw new Error(`too many symlinks resolving ${guest} in ${root}`);
}

/** Users from the tree's /etc/passwd: name → {uid, gid, home, shell}. */
export function readPasswd(root: string): Map<string, { uid: number; gid: number; home: string; shell: string }> {
  const out = new Map<string, { uid: number; gid: number; home: string; shell: string }>();
  let text = "";
  try {
    text = readFileSync(join(root, "etc", "passwd"), "utf8");
  } catch {
    return out;
  }
  for (const line of text.split("\n")) {
    const [name, , uid, gid, , home, shell] = line.split(":");
    if (name && uid !== undefined && gid !== undefined) out.set(name, { uid: Number(uid), gid: Number(gid), home: home ?? "", shell: shell ?? "" });
  }
  return out;
}

/** Disk usage of a tree in bytes (`du -s`, blocks actually used; hard links counted once). */
export async function treeBytes(dir: string): Promise<number> {
  const tail = await mustRun(`measure ${dir}`, "du", ["-s", "-x", "-B1", dir]);
  const n = Number(tail.trim().split(/\s+/)[0]);
  if (!Number.isFinite(n)) throw new Error(`du printed ${JSON.stringify(tail)}`);
  return n;
}
