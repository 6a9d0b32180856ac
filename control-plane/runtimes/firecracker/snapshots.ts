// What a snapshot of a microVM holds in the snapshot store (E2B's snapshot
// API and fork): the disk (`rootfs.ext4`, a reflink copy where the
// filesystem can), for a memory snapshot Firecracker's `vmstate` and
// `memory`, and a small description of the VM (`firecracker-snapshot.json`):
// its shape and whether it had a network device (a restore must give it a tap).
import { copyFileSync, existsSync, linkSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SnapshotUnusableError } from "../errors.js";
import type { SnapshotKind } from "../../domain/snapshot.js";

export const SNAPSHOT_DISK = "rootfs.ext4";
export const SNAPSHOT_VMSTATE = "vmstate";
export const SNAPSHOT_MEMORY = "memory";
const META = "firecracker-snapshot.json";

export interface SnapshotMeta {
  v: 1;
  kind: SnapshotKind;
  cpuCount: number;
  memoryMB: number;
  /** The VM had eth0: a restore of its memory must attach a tap device to it. */
  network: boolean;
}

export function writeSnapshotMeta(dir: string, meta: SnapshotMeta): void {
  writeFileSync(join(dir, META), `${JSON.stringify(meta, null, 2)}\n`);
}

/** The snapshot's description, its files checked; SnapshotUnusableError (a 409) when it cannot be used. */
export function readSnapshotMeta(dir: string, kind: SnapshotKind): SnapshotMeta {
  let meta: SnapshotMeta;
  try {
    meta = JSON.parse(readFileSync(join(dir, META), "utf8")) as SnapshotMeta;
  } catch (err) {
    throw new SnapshotUnusableError(`the snapshot in ${dir} has no readable ${META} (${(err as Error).message}): it was not taken by the firecracker runtime`);
  }
  if (meta.v !== 1 || !(meta.cpuCount > 0) || !(meta.memoryMB > 0)) throw new SnapshotUnusableError(`the snapshot's ${META} in ${dir} is not one this version reads`);
  const files = kind === "memory" ? [SNAPSHOT_DISK, SNAPSHOT_VMSTATE, SNAPSHOT_MEMORY] : [SNAPSHOT_DISK];
  for (const f of files) {
    if (!existsSync(join(dir, f))) throw new SnapshotUnusableError(`the snapshot's ${f} is missing (${join(dir, f)})`);
  }
  if (kind === "memory" && meta.kind !== "memory") throw new SnapshotUnusableError(`the snapshot in ${dir} holds no memory`);
  return meta;
}

/**
 * `src` at `dst` without copying its bytes where possible: a hard link
 * (snapshot files are never written in place: a pause unlinks the old ones
 * before writing new ones), else a copy.
 */
export function placeFile(src: string, dst: string): void {
  rmSync(dst, { force: true });
  try {
    linkSync(src, dst);
  } catch {
    copyFileSync(src, dst);
  }
}

/** Moves a file Firecracker just wrote into the snapshot store (a rename, else copy and unlink). */
export function moveFile(src: string, dst: string): void {
  try {
    renameSync(src, dst);
  } catch {
    copyFileSync(src, dst);
    rmSync(src, { force: true });
  }
}
