// What a sandbox's `/` is made of on the process runtime: its template's
// root filesystem, with every owner shifted into the sandbox id range (so the
// sandbox's root owns what the image's root owned), shared read-only by all
// sandboxes as the overlay's lower layer; and a per-sandbox ext4 image of
// diskSizeMB as the writable layer (the launcher mounts it on a loop device),
// so a sandbox that fills its disk gets ENOSPC and the host's disk does not.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, lchownSync, lstatSync, readdirSync, chmodSync, type Stats } from "node:fs";
import { mkdir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import type { GuestImage } from "../../images/layout.js";
import { runCommand } from "../../host/commands.js";
import { findExecutable } from "../../host/executables.js";

const run = promisify(execFile);

/** The template's rootfs with owners shifted by `base`: `<template dir>/rootfs-ids-<base>`. */
export function shiftedRootfsPath(image: GuestImage, base: number): string {
  return join(image.dir, `rootfs-ids-${base}`);
}

/**
 * Adds `base` to the owner and group of everything under `root` (each inode
 * once: hard links share one), putting back the set-id bits chown clears.
 */
export function shiftOwners(root: string, base: number): void {
  const seen = new Set<string>();
  const visit = (path: string, st: Stats) => {
    const key = `${st.dev}:${st.ino}`;
    if (seen.has(key)) return;
    seen.add(key);
    lchownSync(path, st.uid + base, st.gid + base);
    if (!st.isSymbolicLink() && st.mode & 0o6000) chmodSync(path, st.mode & 0o7777);
  };
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const st = lstatSync(path);
      if (st.isDirectory()) walk(path);
      visit(path, st);
    }
  };
  walk(root);
  visit(root, lstatSync(root));
}

const building = new Map<string, Promise<string>>();

/**
 * The shifted copy of a template's rootfs, made on first use (a copy of
 * the tree, about 2 s for the base image) and kept beside the template, so
 * it goes when the template's build is pruned.
 */
export function shiftedRootfs(image: GuestImage, base: number): Promise<string> {
  const dest = shiftedRootfsPath(image, base);
  if (existsSync(dest)) return Promise.resolve(dest);
  let p = building.get(dest);
  if (!p) {
    p = (async () => {
      const tmp = `${dest}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
      try {
        await run("cp", ["-a", "--", image.rootfsDir, tmp], { maxBuffer: 1 << 20 });
        shiftOwners(tmp, base);
        try {
          await rename(tmp, dest);
        } catch (err) {
          // Another server made it first: theirs is the same.
          if (!existsSync(dest)) throw err;
        }
        return dest;
      } catch (err) {
        throw new Error(`cannot prepare template '${image.name}' for sandboxes (copy with shifted owners): ${(err as Error).message}`);
      } finally {
        await rm(tmp, { recursive: true, force: true });
        building.delete(dest);
      }
    })();
    building.set(dest, p);
  }
  return p;
}

/**
 * A new, empty ext4 image of `sizeMB` at `path` (sparse: it takes host disk
 * only as the sandbox writes; deletions are given back, the launcher mounts
 * it with `discard`). No reserved blocks: all of it is the sandbox's.
 */
export async function createDisk(path: string, sizeMB: number): Promise<void> {
  const mkfs = findExecutable("mkfs.ext4");
  if (!mkfs) throw new Error("mkfs.ext4 is missing: install e2fsprogs (the sandbox's disk is an ext4 image)");
  await mkdir(dirname(path), { recursive: true });
  await rm(path, { force: true });
  const size = `${Math.max(64, Math.floor(sizeMB))}M`;
  try {
    await runCommand(mkfs, ["-q", "-F", "-m", "0", "-i", "8192", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", path, size]);
  } catch (err) {
    await rm(path, { force: true });
    const why = ((err as { stderr?: string }).stderr || (err as Error).message).trim();
    throw new Error(`cannot make the sandbox's disk (mkfs.ext4 ${size}): ${why}`);
  }
}
