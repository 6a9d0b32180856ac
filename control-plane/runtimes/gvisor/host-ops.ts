// Host-side tools of a gVisor sandbox's lifecycle: looking at its sockets
// without following what the sandbox may have put there, flushing and
// copying its disk, and its sentry's OOM score.
import { execFile } from "node:child_process";
import { lstatSync, writeFileSync, type Stats } from "node:fs";
import { promisify } from "node:util";
import type { Logger } from "pino";

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

/**
 * Makes the sentry the OOM killer's first choice in the sandbox's cgroup (and
 * on the host). Otherwise the kernel kills the biggest systrap stub, which may
 * be one thread group's address space of a multi-threaded process such as
 * envd's Node: runsc 20240729 then leaves it a zombie that never finishes
 * exiting, and the sandbox is wedged, alive but unreachable. Killing the
 * sentry ends the whole sandbox, reported as out of memory.
 */
export function preferSentryOnOom(pid: number, log: Logger): void {
  try {
    writeFileSync(`/proc/${pid}/oom_score_adj`, "1000");
  } catch (err) {
    log.warn({ err }, "cannot raise the sandbox's OOM score: an out-of-memory sandbox may hang instead of stopping");
  }
}
