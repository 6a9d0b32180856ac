// Host-side tools of a gVisor sandbox's lifecycle: looking at its sockets
// without following what the sandbox may have put there, flushing and
// copying its disk.
import { execFile } from "node:child_process";
import { lstatSync, type Stats } from "node:fs";
import { promisify } from "node:util";

export function lstatOrUndefined(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch {
    return undefined;
  }
}

/** A Unix socket itself at `path` (a symlink to one does not count). */
export function socketAt(path: string): boolean {
  return lstatOrUndefined(path)?.isSocket() ?? false;
}

const run = promisify(execFile);

/** Flushes the sandbox's disk (its ext4 image, mounted here) to the image file. */
export async function syncFs(mount: string): Promise<void> {
  await run("sync", ["-f", mount]);
}

/** A checkpoint image directory, copied (sparse where it can). */
export async function copyDir(from: string, to: string): Promise<void> {
  await run("cp", ["-r", "--reflink=auto", "--sparse=always", "--", from, to]);
}
