// The sandbox's root disk: a copy-on-write copy of the template's
// rootfs.ext4 where the filesystem can (reflink), else a full (sparse) copy,
// grown to the sandbox's disk size when that is larger than the image.
import { execFile } from "node:child_process";
import { statSync, truncateSync } from "node:fs";
import { promisify } from "node:util";
import type { Logger } from "pino";
import { findExecutable } from "../../host/executables.js";

const run = promisify(execFile);

export interface DiskCopy {
  /** True when the copy shares the template's blocks (reflink). */
  reflinked: boolean;
}

/** Copies `src` to `dst`: reflink (`cp --reflink=always`) or, failing that, a full sparse copy. */
export async function copyRootfs(src: string, dst: string, log: Logger): Promise<DiskCopy> {
  try {
    await run("cp", ["--reflink=always", "--", src, dst]);
    log.debug({ src, dst }, "root disk: copy-on-write (reflink) copy of the template image");
    return { reflinked: true };
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    log.debug({ src, dst, why }, "root disk: the filesystem cannot reflink, making a full copy of the template image");
  }
  try {
    await run("cp", ["--sparse=always", "--", src, dst]);
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    throw new Error(`cannot copy the template image ${src} to ${dst}: ${why}`);
  }
  return { reflinked: false };
}

/**
 * Grows an ext4 image file to `bytes` (and its filesystem with resize2fs)
 * when it is smaller. Never shrinks. Without resize2fs, or when it fails,
 * the disk keeps the image's size and a warning says so.
 */
export async function growRootfs(path: string, bytes: number, log: Logger): Promise<void> {
  const size = statSync(path).size;
  if (!(bytes > size)) return;
  const resize2fs = findExecutable("resize2fs");
  if (!resize2fs) {
    log.warn({ path, bytes, size }, "resize2fs (e2fsprogs) not found: the sandbox's disk keeps the template image's size");
    return;
  }
  truncateSync(path, bytes);
  try {
    await run(resize2fs, [path], { timeout: 60_000 });
    log.debug({ path, from: size, to: bytes }, "root disk grown");
  } catch (err) {
    truncateSync(path, size);
    const why = ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    log.warn({ path, why }, "cannot grow the root disk's filesystem: the sandbox's disk keeps the template image's size");
  }
}

/** Blocks the disk really uses on the host (a reflinked copy counts its shared blocks too) and its size. */
export function diskUsage(path: string): { used: number; total: number } {
  try {
    const st = statSync(path);
    return { used: st.blocks * 512, total: st.size };
  } catch {
    return { used: 0, total: 0 };
  }
}
