import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { request, startControlPlaneChild, type ControlPlaneChild } from "../lib/control-plane.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtBytes, fmtMs, fmtRatio, heading, printTable, verdict } from "../lib/report.js";
import { proxyClient } from "../lib/sandboxes.js";
import { msSince } from "../lib/stats.js";

// 5. filesystem snapshots (process runtime): snapshot time per GiB written, its size, create from it, fork of 1 and of 5

/** E2B's documented pause: about 4 s per GiB (of memory; ours holds files only). */
const E2B_PAUSE_MS_PER_GIB = 4000;
const GIB = 1024 * 1024 * 1024;

async function post(cp: ControlPlaneChild, path: string, body: unknown): Promise<{ ms: number; body: unknown }> {
  const t0 = performance.now();
  const res = await request(`${cp.url}${path}`, "POST", { "x-api-key": cp.apiKey }, body);
  const ms = msSince(t0);
  if (res.status !== 201) throw new Error(`POST ${path} answered ${res.status}: ${res.body.slice(0, 300)}`);
  return { ms, body: JSON.parse(res.body) };
}

/** Bytes the snapshot builds take on the host (sparse images count what they hold). */
function snapshotBytes(dataDir: string): number {
  const root = join(dataDir, "snapshots");
  let total = 0;
  for (const build of readdirSync(root)) for (const f of readdirSync(join(root, build))) total += statSync(join(root, build, f)).blocks * 512;
  return total;
}

export async function benchSnapshots(): Promise<GoalResult[]> {
  const mib = envInt("LOCALE2B_BENCH_SNAPSHOT_MIB", 256);
  heading(`sandboxes 5/5: filesystem snapshots (process runtime): ${mib} MiB written, snapshot, create from it, fork of 1 and of 5`);
  const cp = await startControlPlaneChild();
  try {
    const sb = await cp.createSandbox();
    const client = proxyClient(cp, sb);
    for await (const _ of client.start({ process: { cmd: "/bin/sh", args: ["-c", `dd if=/dev/urandom of=/home/user/blob bs=1M count=${mib} conv=fsync 2>/dev/null`] }, stdin: false })) {
      // consumed to its end
    }
    const t0 = performance.now();
    await cp.createSandbox();
    const createMs = msSince(t0);
    const snap = await post(cp, `/sandboxes/${sb.id}/snapshots`, {});
    const snapshotId = (snap.body as { snapshotID: string }).snapshotID;
    const size = snapshotBytes(cp.dataDir);
    const fromSnap = await post(cp, "/v2/sandboxes", { templateID: snapshotId, timeout: 3600 });
    cp.live.add((fromSnap.body as { sandboxID: string }).sandboxID);
    const forks: { count: number; ms: number }[] = [];
    for (const count of [1, 5]) {
      const f = await post(cp, `/sandboxes/${sb.id}/fork`, { count, timeout: 3600 });
      const results = f.body as { sandbox?: { sandboxID: string }; error?: { message: string } }[];
      for (const r of results) if (r.sandbox) cp.live.add(r.sandbox.sandboxID);
      const failed = results.filter((r) => !r.sandbox);
      if (failed.length) throw new Error(`fork of ${count}: ${failed.length} failed (${failed[0]!.error?.message})`);
      forks.push({ count, ms: f.ms });
    }
    await request(`${cp.url}/templates/${encodeURIComponent(snapshotId)}`, "DELETE", { "x-api-key": cp.apiKey });
    const msPerGiB = (snap.ms * GIB) / (mib * 1024 * 1024);
    printTable(
      ["what", "time", "vs a fresh create", "note"],
      [
        ["create a fresh sandbox (baseline)", fmtMs(createMs), fmtRatio(1), ""],
        [`snapshot (${mib} MiB written)`, fmtMs(snap.ms), fmtRatio(snap.ms / createMs), `${fmtMs(msPerGiB)} per GiB; image ${fmtBytes(size)} on the host`],
        ["create from the snapshot", fmtMs(fromSnap.ms), fmtRatio(fromSnap.ms / createMs), "copies the image (a reflink where the filesystem has them)"],
        ...forks.map((f) => [`fork of ${f.count}`, fmtMs(f.ms), fmtRatio(f.ms / createMs), `snapshot + ${f.count} creates`]),
      ],
    );
    const ok = msPerGiB <= E2B_PAUSE_MS_PER_GIB;
    console.log(`snapshot per GiB written: ${verdict(ok)} (E2B documents about ${E2B_PAUSE_MS_PER_GIB} ms per GiB to pause)`);
    return [
      { benchmark: "sandboxes", metric: "snapshot, ms per GiB written", value: fmtMs(msPerGiB), goal: `<= ${E2B_PAUSE_MS_PER_GIB} ms (E2B pause)`, ok },
      { benchmark: "sandboxes", metric: "snapshot image size", value: fmtBytes(size), goal: `~${mib} MiB written`, ok: size < (mib + 256) * 1024 * 1024 },
    ];
  } finally {
    await cp.stop();
  }
}
