// Copies a folder of sandbox files (a snapshot, a pause to disk) the way
// they need to be copied: sparse disk images stay sparse, a filesystem that
// can share blocks (XFS, Btrfs) shares them, and modes and owners are kept
// (the files of a sandbox belong to its mapped user ids). coreutils' cp does
// all of that; it is on every Linux host.
import { execFile } from "node:child_process";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { promisify } from "node:util";
import { findExecutable } from "../host/executables.js";

const run = promisify(execFile);

/** `cp -a --reflink=auto --sparse=always src dest`; dest must not exist. Rejects with cp's message. */
export async function copyTree(src: string, dest: string): Promise<void> {
  const cp = findExecutable("cp") ?? "cp";
  mkdirSync(dirname(dest), { recursive: true, mode: 0o700 });
  try {
    await run(cp, ["-a", "--reflink=auto", "--sparse=always", "--no-target-directory", src, dest], { maxBuffer: 1024 * 1024 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error((e.stderr || e.message).trim());
  }
}
