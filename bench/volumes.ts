import { execFileSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { CommandExitError, Sandbox, Volume } from "e2b";
import { onCleanup } from "./lib/cleanup.js";
import { startControlPlaneChild, type ControlPlaneChild } from "./lib/control-plane.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtBytes, fmtRate, fmtRatio, heading, printTable } from "./lib/report.js";
import { median } from "./lib/stats.js";

/**
 * `npm run bench -- volumes`: file throughput inside one sandbox (process
 * runtime) on a mounted volume against the sandbox's own disk, measured
 * interleaved in the same sandbox (order alternating per repetition): a
 * sequential write of LOCALE2B_BENCH_VOLUME_BYTES with fsync (dd
 * conv=fsync), then a sequential read of it with O_DIRECT (dd iflag=direct:
 * past the sandbox's page cache). Both are ext4 on a loop device over a
 * sparse file in the data dir, so the ratio shows what the volume's bind
 * mount costs. The sandbox's disk is the baseline.
 */

const GOAL_RATIO = 0.8;
const MiB = 1024 * 1024;

async function sh(sbx: Sandbox, cmd: string): Promise<string> {
  try {
    return (await sbx.commands.run(cmd, { timeoutMs: 600_000 })).stdout;
  } catch (err) {
    if (err instanceof CommandExitError) throw new Error(`'${cmd}' failed (${err.exitCode}): ${err.stderr || err.stdout}`);
    throw err;
  }
}

/** Nanoseconds `cmd` takes inside the sandbox (timed there, so the API's round trip is not in it). */
async function timed(sbx: Sandbox, cmd: string): Promise<number> {
  const out = await sh(sbx, `a=$(date +%s%N); ${cmd} >/dev/null 2>&1 || exit 3; b=$(date +%s%N); echo $((b - a))`);
  return Number(out.trim());
}

/** Unmounts what a benchmark that died left mounted in its data dir (its volumes), so the data dir can go. */
function unmountVolumes(dataDir: string): void {
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const point = line.split(" ")[4];
    if (point?.startsWith(`${dataDir}/volumes/`)) execFileSync("umount", ["-l", point], { stdio: "ignore" });
  }
  rmSync(dataDir, { recursive: true, force: true });
}

export async function benchVolumes(): Promise<GoalResult[]> {
  heading("volumes: file throughput in a sandbox, volume vs the sandbox's own disk (process runtime)");
  if (process.getuid?.() !== 0) {
    console.log("skipped: volumes need root (loop-mounted ext4 images)");
    return [];
  }
  const bytes = envInt("LOCALE2B_BENCH_VOLUME_BYTES", 256 * MiB);
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  const count = Math.max(1, Math.floor(bytes / MiB));
  let cp: ControlPlaneChild | undefined;
  let forget: (() => void) | undefined;
  const saved = { ...process.env };
  try {
    cp = await startControlPlaneChild({ extraArgs: ["--warm-pool", "0"] });
    const dataDir = cp.dataDir;
    forget = onCleanup(() => unmountVolumes(dataDir));
    Object.assign(process.env, { E2B_API_URL: cp.url, E2B_SANDBOX_URL: cp.url, E2B_VOLUME_API_URL: cp.url, E2B_API_KEY: cp.apiKey });
    delete process.env.E2B_DEBUG;
    const vol = await Volume.create(`bench-${Date.now()}`);
    // A disk big enough for the file on both sides (the volume's default size is 10 GiB, sparse).
    const sbx = await Sandbox.create("base", { volumeMounts: { "/mnt/vol": vol }, timeoutMs: 3_600_000 });
    const targets = { volume: "/mnt/vol/bench.bin", disk: "/home/user/bench.bin" };
    const rates: Record<"volume" | "disk", { write: number[]; read: number[] }> = { volume: { write: [], read: [] }, disk: { write: [], read: [] } };
    for (let rep = 0; rep < reps; rep++) {
      const order = rep % 2 === 0 ? (["volume", "disk"] as const) : (["disk", "volume"] as const);
      for (const side of order) {
        const f = targets[side];
        const w = await timed(sbx, `dd if=/dev/zero of=${f} bs=1M count=${count} conv=fsync`);
        const r = await timed(sbx, `dd if=${f} of=/dev/null bs=1M iflag=direct`);
        await sh(sbx, `rm -f ${f}`);
        rates[side].write.push((count * MiB) / MiB / (w / 1e9));
        rates[side].read.push((count * MiB) / MiB / (r / 1e9));
      }
    }
    await sbx.kill();
    await Volume.destroy(vol.volumeId);
    const med = (side: "volume" | "disk", op: "write" | "read") => median(rates[side][op]);
    const rows = (["write", "read"] as const).map((op) => [
      `${op} ${fmtBytes(count * MiB)} (${op === "write" ? "dd conv=fsync" : "dd iflag=direct"})`,
      fmtRate(med("volume", op)),
      fmtRate(med("disk", op)),
      fmtRatio(med("volume", op) / med("disk", op)),
    ]);
    printTable(["median of " + reps, "volume", "sandbox disk", "volume / disk"], rows);
    return (["write", "read"] as const).map((op) => {
      const ratio = med("volume", op) / med("disk", op);
      return { benchmark: "volumes", metric: `${op} throughput, volume / sandbox disk`, value: fmtRatio(ratio), goal: `>= ${GOAL_RATIO}x`, ok: ratio >= GOAL_RATIO };
    });
  } finally {
    if (cp) {
      // Sandboxes first (a mounted volume cannot be destroyed), then the volumes, then the server.
      await cp.deleteAll().catch(() => undefined);
      for (const v of await Volume.list().catch(() => [])) await Volume.destroy(v.volumeId).catch(() => undefined);
      await cp.stop();
      unmountVolumes(cp.dataDir);
    }
    process.env = saved;
    forget?.();
  }
}
