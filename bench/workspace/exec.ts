import { Sandbox } from "e2b";
import { startControlPlaneChild, type ControlPlaneChild } from "../lib/control-plane.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable, verdict } from "../lib/report.js";
import { median, msSince, p95 } from "../lib/stats.js";
import { ws } from "./client.js";

// 1. exec round trip: workspace exec vs E2B commands.run through the proxy

/** Workspace exec of `true` may cost at most this much more than the SDK's commands.run('true'). */
const GOAL_WS_RATIO = 1.5;
/** commands.run with sandbox activity watched vs not: "not measurably slower". */
const GOAL_WATCH_RATIO = 1.1;

interface Variant {
  name: string;
  run: () => Promise<void>;
  times: number[];
}

async function sdkSandbox(cp: ControlPlaneChild, id: string): Promise<Sandbox> {
  return Sandbox.connect(id, { apiKey: cp.apiKey, apiUrl: cp.url, sandboxUrl: cp.url });
}

export async function benchWorkspaceExec(): Promise<GoalResult[]> {
  const n = envInt("LOCALE2B_BENCH_EXEC_N", 200);
  const warmup = envInt("LOCALE2B_BENCH_WARMUP", 20);
  heading(`workspace 1/3: exec of 'true': workspace exec vs the E2B SDK's commands.run through the proxy (N=${n} each after ${warmup} warm-up, interleaved)`);
  // Two servers: the default, and one that does not watch sandbox activity (the cost of exec events on the E2B path).
  const on = await startControlPlaneChild({ extraArgs: ["--warm-pool", "0"] });
  const off = await startControlPlaneChild({ extraArgs: ["--warm-pool", "0", "--no-sandbox-activity"] });
  try {
    const wsSandbox = await ws<{ sandbox_id: string }>(on, "POST", "/sandboxes", { workspace_id: "bench" });
    const id = wsSandbox.sandbox_id;
    on.live.add(id);
    const offSandbox = await off.createSandbox();
    const sdkOn = await sdkSandbox(on, id);
    const sdkOff = await sdkSandbox(off, offSandbox.id);
    const v = (name: string, run: () => Promise<void>): Variant => ({ name, run, times: [] });
    const variants = [
      v("E2B commands.run('true') through the proxy (activity watched: the default)", async () => {
        const r = await sdkOn.commands.run("true");
        if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`);
      }),
      v("E2B commands.run('true') through the proxy (server with --no-sandbox-activity)", async () => {
        const r = await sdkOff.commands.run("true");
        if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`);
      }),
      v("workspace POST /sandboxes/{id}/exec {command: 'true'}", async () => {
        const r = await ws<{ success: boolean }>(on, "POST", `/sandboxes/${id}/exec`, { command: "true" });
        if (!r.success) throw new Error("workspace exec of true failed");
      }),
    ];
    for (let i = 0; i < warmup; i++) for (const x of variants) await x.run();
    globalThis.gc?.();
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < variants.length; k++) {
        const x = variants[(i + k) % variants.length]!;
        const t0 = performance.now();
        await x.run();
        x.times.push(msSince(t0));
      }
    }
    const [sdkOnV, sdkOffV, wsV] = variants as [Variant, Variant, Variant];
    const base = median(sdkOnV.times);
    printTable(
      ["variant", "median", "p95", "/ commands.run"],
      variants.map((x) => [x.name, fmtMs(median(x.times)), fmtMs(p95(x.times)), fmtRatio(median(x.times) / base)]),
    );
    const wsRatio = median(wsV.times) / base;
    const watchRatio = base / median(sdkOffV.times);
    console.log(
      `workspace exec / commands.run: ${fmtRatio(wsRatio)} (goal <= ${GOAL_WS_RATIO}x: ${verdict(wsRatio <= GOAL_WS_RATIO)}); ` +
        `commands.run watched / not watched: ${fmtRatio(watchRatio)} (goal <= ${GOAL_WATCH_RATIO}x: ${verdict(watchRatio <= GOAL_WATCH_RATIO)}).\n` +
        "Both run `/bin/bash -l -c true` through envd's process API; the SDK talks Connect JSON to the proxy, the workspace API one\n" +
        "JSON request to the control plane, which runs the Start itself (Connect binary over the sandbox's pooled socket).",
    );
    return [
      { benchmark: "workspace", metric: "exec true: workspace vs E2B commands.run", value: fmtRatio(wsRatio), goal: `<= ${GOAL_WS_RATIO}x`, ok: wsRatio <= GOAL_WS_RATIO },
      { benchmark: "workspace", metric: "commands.run: activity watched vs not", value: fmtRatio(watchRatio), goal: `<= ${GOAL_WATCH_RATIO}x`, ok: watchRatio <= GOAL_WATCH_RATIO },
    ];
  } finally {
    await on.stop();
    await off.stop();
  }
}
