// Filesystem-only snapshots on the process runtime. A sandbox's writable
// layer is its own ext4 image (disk.img, the overlay's upper layer over the
// template's rootfs), mounted on a loop device in the sandbox's mount
// namespace. A snapshot is a copy of that image taken while the sandbox's
// processes are frozen and after its filesystem was synced, so the copy is
// what a clean crash at that instant would leave (the journal replays on
// the next mount); a sandbox started from it gets its own copy again.
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { runCommand } from "../../host/commands.js";
import { findExecutable } from "../../host/executables.js";

/** A coreutils program's path (they are everywhere; the bare name if not found, for execFile's own error). */
const tool = (name: string) => findExecutable(name) ?? name;

/** The image's name inside a snapshot directory. */
export const SNAPSHOT_DISK = "disk.img";

/**
 * Flushes the sandbox's filesystem: syncfs on its root (an overlay, whose
 * sync reaches the upper layer: the ext4 image, and through the loop device
 * the image file on the host).
 */
export async function syncSandboxFs(initPid: number): Promise<void> {
  try {
    await runCommand(tool("sync"), ["-f", `/proc/${initPid}/root/`]);
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr || (err as Error).message).trim();
    throw new Error(`cannot flush the sandbox's filesystem: ${why}`);
  }
}

/**
 * Copies an image (a reflink where the host filesystem has them, else a
 * sparse copy: holes stay holes). A failed copy leaves no file behind.
 */
export async function copyImage(from: string, to: string): Promise<void> {
  try {
    await runCommand(tool("cp"), ["--reflink=auto", "--sparse=always", "--", from, to]);
  } catch (err) {
    await rm(to, { force: true });
    const why = ((err as { stderr?: string }).stderr || (err as Error).message).trim();
    throw new Error(`cannot copy the disk image: ${why}`);
  }
}

/** Where a snapshot directory keeps the image. */
export function snapshotDiskPath(dir: string): string {
  return join(dir, SNAPSHOT_DISK);
}
