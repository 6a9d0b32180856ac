import { Sandbox } from "e2b";
import { startControlPlaneChild } from "../lib/control-plane.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable, verdict } from "../lib/report.js";
import { median, msSince, p95 } from "../lib/stats.js";
import { ws } from "./client.js";

// 2. session output poll latency

/** From typing a line into a session to reading its echo: at most this much more than an E2B PTY's echo. */
const GOAL_RATIO = 2;

interface OutputRead {
  output: string;
  next_offset: number;
}

export async function benchWorkspaceSession(): Promise<GoalResult[]> {
  const n = envInt("LOCALE2B_BENCH_EXEC_N", 200);
  const warmup = envInt("LOCALE2B_BENCH_WARMUP", 20);
  heading(`workspace 2/3: a background session's output: typing a line to reading its echo (N=${n} each after ${warmup} warm-up, interleaved)`);
  const cp = await startControlPlaneChild({ extraArgs: ["--warm-pool", "0"] });
  try {
    const { sandbox_id: id } = await ws<{ sandbox_id: string }>(cp, "POST", "/sandboxes", {});
    cp.live.add(id);
    const { session_id: session } = await ws<{ session_id: string }>(cp, "POST", `/sandboxes/${id}/exec/start`, { command: "cat" });
    let offset = 0;
    /** Workspace API: POST input, then long polls (wait_ms) from the last offset until the echo is there. */
    const viaWorkspace = async (i: number) => {
      const line = `ws-${i}`;
      await ws(cp, "POST", `/sandboxes/${id}/exec/${session}/input`, { input: `${line}\n` });
      let text = "";
      while (!text.includes(line)) {
        const r = await ws<OutputRead>(cp, "GET", `/sandboxes/${id}/exec/${session}/output?offset=${offset}&wait_ms=5000`);
        text += r.output;
        offset = r.next_offset;
      }
    };
    /** Plain polls every 10 ms (no wait_ms), as a harness that does not long-poll. */
    const viaPlainPolls = async (i: number) => {
      const line = `pp-${i}`;
      await ws(cp, "POST", `/sandboxes/${id}/exec/${session}/input`, { input: `${line}\n` });
      let text = "";
      for (;;) {
        const r = await ws<OutputRead>(cp, "GET", `/sandboxes/${id}/exec/${session}/output?offset=${offset}`);
        text += r.output;
        offset = r.next_offset;
        if (text.includes(line)) return;
        await new Promise((res) => setTimeout(res, 10));
      }
    };
    // Baseline: the same `cat` in an E2B PTY, its output pushed on the SDK's stream.
    const sbx = await Sandbox.connect(id, { apiKey: cp.apiKey, apiUrl: cp.url, sandboxUrl: cp.url });
    let ptyText = "";
    let wake: (() => void) | undefined;
    const pty = await sbx.pty.create({
      cols: 200,
      rows: 50,
      timeoutMs: 0,
      onData: (d) => {
        ptyText += new TextDecoder().decode(d);
        wake?.();
      },
    });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("exec cat\n"));
    const viaPty = async (i: number) => {
      const line = `pty-${i}`;
      ptyText = "";
      const seen = new Promise<void>((resolve) => (wake = () => ptyText.includes(line) && resolve()));
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode(`${line}\n`));
      await seen;
    };
    const variants = [
      { name: "E2B PTY: sendInput, echo on the SDK's stream (through the proxy)", run: viaPty, times: [] as number[] },
      { name: "workspace: POST input, GET output?wait_ms (long poll)", run: viaWorkspace, times: [] as number[] },
      { name: "workspace: POST input, GET output every 10 ms", run: viaPlainPolls, times: [] as number[] },
    ];
    for (let i = 0; i < warmup; i++) for (const x of variants) await x.run(-i - 1);
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < variants.length; k++) {
        const x = variants[(i + k) % variants.length]!;
        const t0 = performance.now();
        await x.run(i);
        x.times.push(msSince(t0));
      }
    }
    await sbx.pty.kill(pty.pid);
    const base = median(variants[0]!.times);
    printTable(
      ["variant", "median", "p95", "/ E2B PTY"],
      variants.map((x) => [x.name, fmtMs(median(x.times)), fmtMs(p95(x.times)), fmtRatio(median(x.times) / base)]),
    );
    const ratio = median(variants[1]!.times) / base;
    console.log(`long poll / E2B PTY: ${fmtRatio(ratio)} (goal <= ${GOAL_RATIO}x: ${verdict(ratio <= GOAL_RATIO)}). Each round trip is one line typed and its echo read back.`);
    return [{ benchmark: "workspace", metric: "session echo: long poll vs E2B PTY stream", value: fmtRatio(ratio), goal: `<= ${GOAL_RATIO}x`, ok: ratio <= GOAL_RATIO }];
  } finally {
    await cp.stop();
  }
}
