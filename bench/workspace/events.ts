import { routedProcessClient } from "../lib/clients.js";
import { request, startControlPlaneChild, type ControlPlaneChild, type SandboxHandle } from "../lib/control-plane.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMiB, fmtMs, heading, printTable, verdict } from "../lib/report.js";
import { RssSampler } from "../lib/rss.js";
import { proxyAgent, startTrue } from "../lib/sandboxes.js";
import { median, p95 } from "../lib/stats.js";
import { openEvents, type SseStream } from "./client.js";

// 3. event stream throughput with many sandboxes running commands, and a stalled consumer

/** The server's RSS may grow at most this much while a stalled consumer is connected. */
const GOAL_STALLED_RSS_MIB = 64;

interface Load {
  commands: number;
  ms: number;
}

/** Every sandbox runs `perSandbox` Starts of /bin/true through the proxy, one after another, all sandboxes at once. */
async function runLoad(cp: ControlPlaneChild, sandboxes: SandboxHandle[], perSandbox: number): Promise<Load> {
  const t0 = performance.now();
  await Promise.all(
    sandboxes.map(async (sb) => {
      const client = routedProcessClient({ baseUrl: cp.url, binary: false, agent: proxyAgent, headers: sb.proxyHeaders });
      for (let i = 0; i < perSandbox; i++) await startTrue(client);
    }),
  );
  return { commands: sandboxes.length * perSandbox, ms: performance.now() - t0 };
}

async function overflowed(cp: ControlPlaneChild): Promise<number> {
  const text = (await request(`${cp.url}/metrics`, "GET", {})).body;
  return Number(/^locale2b_event_subscribers_overflowed_total (\d+)/m.exec(text)?.[1] ?? NaN);
}

/** Collects exec events of the load on a fast consumer: how many, and how late each arrived. */
function collect(stream: SseStream): { count: () => number; lags: number[]; lastAt: () => number } {
  const lags: number[] = [];
  let last = 0;
  stream.onEvent((e, at) => {
    lags.push(at - Date.parse(String(e.timestamp)));
    last = at;
  });
  return { count: () => lags.length, lags, lastAt: () => last };
}

async function waitFor(cond: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
  return true;
}

export async function benchWorkspaceEvents(): Promise<GoalResult[]> {
  const count = envInt("LOCALE2B_BENCH_WS_SANDBOXES", 100);
  const perSandbox = envInt("LOCALE2B_BENCH_WS_COMMANDS", 50);
  heading(`workspace 3/3: the event stream with ${count} sandboxes each running ${perSandbox} commands (/bin/true through the proxy), all at once`);
  const cp = await startControlPlaneChild({ extraArgs: ["--warm-pool", "0"] });
  try {
    const sandboxes: SandboxHandle[] = [];
    for (let i = 0; i < count; i += 8) {
      sandboxes.push(...(await Promise.all(Array.from({ length: Math.min(8, count - i) }, () => cp.createSandbox()))));
    }
    const expected = count * perSandbox * 2; // exec.started + exec.completed
    const rows: string[][] = [];
    const results: GoalResult[] = [];

    // a) one fast consumer.
    globalThis.gc?.();
    const fast = await openEvents(cp, "event_type=exec.*");
    const seen = collect(fast);
    let rss = await RssSampler.start(cp.pid);
    const a = await runLoad(cp, sandboxes, perSandbox);
    const complete = await waitFor(() => seen.count() >= expected, 60_000);
    const rssA = await rss.stop();
    const throughput = (seen.count() / a.ms) * 1000;
    rows.push([
      "one consumer reading",
      `${seen.count()} / ${expected}`,
      `${throughput.toFixed(0)} events/s`,
      `${(a.commands / (a.ms / 1000)).toFixed(0)} commands/s`,
      fmtMs(median(seen.lags)),
      fmtMs(p95(seen.lags)),
      fmtMiB(rssA.start),
      fmtMiB(rssA.growth),
      "-",
    ]);
    fast.close();

    // b) the same load with one more consumer that never reads.
    globalThis.gc?.();
    const before = await overflowed(cp);
    const stalled = await openEvents(cp, "");
    stalled.stall();
    const fast2 = await openEvents(cp, "event_type=exec.*");
    const seen2 = collect(fast2);
    rss = await RssSampler.start(cp.pid);
    const b = await runLoad(cp, sandboxes, perSandbox);
    await waitFor(() => seen2.count() >= expected, 60_000);
    const rssB = await rss.stop();
    const cut = (await overflowed(cp)) - before;
    rows.push([
      "the same, plus one stalled consumer",
      `${seen2.count()} / ${expected}`,
      `${((seen2.count() / b.ms) * 1000).toFixed(0)} events/s`,
      `${(b.commands / (b.ms / 1000)).toFixed(0)} commands/s`,
      fmtMs(median(seen2.lags)),
      fmtMs(p95(seen2.lags)),
      fmtMiB(rssB.start),
      fmtMiB(rssB.growth),
      cut > 0 ? "yes" : "no (its socket buffers held everything)",
    ]);
    fast2.close();
    stalled.close();
    printTable(["consumers", "events received", "throughput", "load", "lag p50", "lag p95", "server RSS", "RSS growth", "stalled one cut off"], rows);
    const lossless = complete && seen2.count() >= expected;
    console.log(
      `Every event reached the reading consumer: ${lossless ? "yes" : "NO"}. Lag: from the event's timestamp (when envd saw the process start or end)\n` +
        "to its arrival here. A stalled consumer costs the server at most its queue (2000 events) and a socket's buffers: once it falls further\n" +
        "behind it is disconnected and may resume with Last-Event-ID from the event log.",
    );
    const growthMiB = rssB.growth / (1024 * 1024);
    results.push(
      { benchmark: "workspace", metric: "events delivered, 2 per command", value: `${seen2.count()} / ${expected}`, goal: "all", ok: lossless },
      { benchmark: "workspace", metric: "server RSS growth with a stalled consumer", value: fmtMiB(rssB.growth), goal: `<= ${GOAL_STALLED_RSS_MIB} MiB`, ok: growthMiB <= GOAL_STALLED_RSS_MIB },
    );
    console.log(`stalled-consumer RSS growth: ${fmtMiB(rssB.growth)} (goal <= ${GOAL_STALLED_RSS_MIB} MiB: ${verdict(growthMiB <= GOAL_STALLED_RSS_MIB)})`);
    return results;
  } finally {
    await cp.stop();
  }
}
