// The host's side of a build's export: the tar stream a build sandbox writes
// of its root, unpacked into the new image's rootfs. The stream comes from a
// sandbox whose every binary the build's steps could have replaced, so it is
// read as hostile: GNU tar as root with its guards on (no absolute names, no
// `..`, symlinks made last so nothing is written through one), into a fresh
// directory of its own, and every device node it made is removed after
// (a sandbox gets its /dev from its runtime).
import { spawn } from "node:child_process";
import { chmod, link, lstat, mkdir, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Writable } from "node:stream";

/** A tar reader into `dest` (which must not exist): write the stream into `stdin`, then await `done`. */
export function unpackInto(dest: string): { stdin: Writable; done: Promise<void> } {
  const child = spawn(
    "tar",
    [
      "-x",
      "-p",
      "-f",
      "-",
      "-C",
      dest,
      "--numeric-owner",
      "--same-owner",
      "--no-overwrite-dir",
      "--delay-directory-restore",
      "--xattrs",
      "--xattrs-include=*",
      "--no-acls",
    ],
    { stdio: ["pipe", "ignore", "pipe"] },
  );
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const done = new Promise<void>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`unpacking the build's root failed (tar ${code ?? signal}): ${stderr.trim().split("\n").slice(-3).join(" | ")}`));
    });
  });
  child.stdin!.on("error", () => undefined); // tar's own exit says why
  return { stdin: child.stdin!, done };
}

/** Removes block and character devices anywhere under `root` (never followed through a symlink). */
export async function removeDeviceNodes(root: string): Promise<number> {
  let removed = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.isBlockDevice() || e.isCharacterDevice()) {
        await rm(p, { force: true });
        removed++;
      }
    }
  };
  await walk(root);
  return removed;
}

/** The mount points a runtime needs in every root (the export leaves them out). */
export async function addMountPoints(root: string): Promise<void> {
  for (const [dir, mode] of [["proc", 0o555], ["sys", 0o555], ["dev", 0o755], ["run", 0o755], ["tmp", 0o1777]] as const) {
    const p = join(root, dir);
    const st = await lstat(p).catch(() => undefined);
    if (st && !st.isDirectory()) await rm(p, { force: true });
    if (!st?.isDirectory()) await mkdir(p);
    await chmod(p, mode);
  }
}

/**
 * Replaces each regular file of `root` that its base image has unchanged
 * (same path, size, mode, owner and modification time to the second: what a
 * tar keeps) with a hard link to the base's file, so a template built on
 * another shares its files instead of copying them (images are read-only:
 * nothing writes into their files in place). Both trees are walked together
 * and only through real directories of both, so no symlink of either tree is
 * ever followed. Returns the bytes now shared.
 */
export async function linkUnchanged(root: string, base: string): Promise<number> {
  let shared = 0;
  const walk = async (dir: string, baseDir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      const b = join(baseDir, e.name);
      const bs = await lstat(b).catch(() => undefined);
      if (!bs) continue;
      if (e.isDirectory()) {
        if (bs.isDirectory()) await walk(p, b);
        continue;
      }
      if (!e.isFile() || !bs.isFile()) continue;
      const s = await lstat(p);
      if (s.size !== bs.size || s.mode !== bs.mode || s.uid !== bs.uid || s.gid !== bs.gid || Math.floor(s.mtimeMs / 1000) !== Math.floor(bs.mtimeMs / 1000)) continue;
      if (s.dev === bs.dev && s.ino === bs.ino) continue;
      const tmp = `${p}.l2b-link`;
      try {
        await link(b, tmp);
        await rename(tmp, p);
        shared += s.size;
      } catch {
        await rm(tmp, { force: true });
      }
    }
  };
  await walk(root, base);
  return shared;
}
