// Filesystem-only snapshots of a QEMU microVM: its disk is a qcow2 overlay
// (the sandbox's writes) on the template's raw rootfs image. QEMU copies
// the overlay's own clusters at one instant while the guest runs on
// (`drive-backup` with sync=top: copy-before-write keeps the copy at the
// point it started); the copy keeps the template image as its backing file.
// What the guest still held in its page cache is not in it: the copy is what
// a power cut at that instant leaves, which ext4's journal recovers at the
// next boot. A sandbox started from it boots on its own copy of that overlay.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Qmp } from "./qmp.js";

export const SNAPSHOT_DISK = "disk.qcow2";

export function snapshotDiskPath(dir: string): string {
  return join(dir, SNAPSHOT_DISK);
}

interface JobInfo {
  id: string;
  status: string;
  error?: string;
}

/** Copies the VM's overlay (drive `root`) into `dest` and waits for the job's end. */
export async function backupDisk(qmp: Qmp, dest: string, timeoutMs = 30 * 60_000): Promise<void> {
  const job = `snap${randomBytes(6).toString("hex")}`;
  await qmp.execute("drive-backup", {
    "job-id": job,
    device: "root",
    sync: "top",
    target: snapshotDiskPath(dest),
    format: "qcow2",
    mode: "absolute-paths",
    "auto-dismiss": false,
  });
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const jobs = (await qmp.execute("query-jobs")) as JobInfo[];
      const mine = jobs.find((j) => j.id === job);
      if (!mine) throw new Error(`QEMU lost the disk copy job ${job}`);
      if (mine.status === "concluded" || mine.status === "null") {
        if (mine.error) throw new Error(`QEMU could not copy the disk: ${mine.error}`);
        return;
      }
      if (Date.now() > deadline) {
        await qmp.execute("job-cancel", { id: job }).catch(() => undefined);
        throw new Error(`the disk copy did not finish within ${Math.round(timeoutMs / 1000)} s`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await qmp.execute("job-dismiss", { id: job }).catch(() => undefined);
  }
}

/**
 * A snapshot overlay's backing file (the template build's rootfs.ext4 it was
 * taken on; absent for an overlay without one), or why it cannot boot: that
 * file is gone (a snapshot taken before builds in use were kept, its build
 * pruned after the template was rebuilt twice).
 */
export function snapshotBacking(qemuImg: string, disk: string): { backing?: string; problem?: string } {
  const r = spawnSync(qemuImg, ["info", "--output=json", "-U", disk], { encoding: "utf8" });
  if (r.status !== 0) return { problem: `cannot read the snapshot's disk ${disk}: ${(r.stderr || r.error?.message || "").trim()}` };
  const info = JSON.parse(r.stdout) as { "full-backing-filename"?: string; "backing-filename"?: string };
  const backing = info["full-backing-filename"] ?? info["backing-filename"];
  if (backing && !existsSync(backing)) {
    return { problem: `the template image this snapshot was taken on (${backing}) is gone (the template was rebuilt since and that build pruned): take the snapshot again` };
  }
  return backing ? { backing } : {};
}

/** Why a snapshot's overlay cannot boot, or undefined (snapshotBacking). */
export function missingBacking(qemuImg: string, disk: string): string | undefined {
  return snapshotBacking(qemuImg, disk).problem;
}
