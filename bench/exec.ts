import type { Client } from "@connectrpc/connect";
import { spawn } from "node:child_process";
import http from "node:http";
import { Process } from "../gen/ts/process/process_pb.js";
import { processClient } from "./lib/clients.js";
import { processCpuSeconds, selfCpuSeconds } from "./lib/cpu.js";
import { startEnvdChild } from "./lib/envd.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtMiB, fmtMs, fmtRatio, heading, printTable, verdict } from "./lib/report.js";
import { readRss } from "./lib/rss.js";
import { median, msSince, p95 } from "./lib/stats.js";

const GOAL_RATIO = 1.5;

/** Local baseline: spawn /bin/true with the stdio envd gives a stdin:false process, wait for close. */
function localTrue(): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/true", [], { stdio: ["ignore", "pipe", "pipe"] });
    child.once("error", reject);
    child.once("close", (code) => (code === 0 ? resolve() : reject(new Error(`/bin/true exited ${code}`))));
  });
}

/** One Start of /bin/true through envd, consumed until the stream ends; checks the end event. */
export async function envdTrue(client: Client<typeof Process>): Promise<void> {
  let exitCode: number | undefined;
  for await (const res of client.start({ process: { cmd: "/bin/true", args: [] }, stdin: false })) {
    const e = res.event?.event;
    if (e?.case === "end") exitCode = e.value.exitCode;
  }
  if (exitCode !== 0) throw new Error(`Start /bin/true: the stream ended without an end event with exit code 0 (got ${exitCode})`);
}

/** The Start request as a Connect streaming JSON body: one envelope (flags 0, big-endian length). */
const RAW_START = (() => {
  const json = Buffer.from(JSON.stringify({ process: { cmd: "/bin/true", args: [] }, stdin: false }));
  const frame = Buffer.alloc(5 + json.length);
  frame.writeUInt32BE(json.length, 1);
  json.copy(frame, 5);
  return frame;
})();

const rawAgent = new http.Agent({ keepAlive: true });

/**
 * The same Start hand-framed over node:http, with no Connect client library:
 * shows how much of the round trip is envd and how much is the client.
 */
function rawTrue(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/process.Process/Start`, {
      method: "POST",
      agent: rawAgent,
      headers: { "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1", "Content-Length": RAW_START.length },
    });
    req.once("error", reject);
    req.once("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.once("error", reject);
      res.once("end", () => {
        const body = Buffer.concat(chunks);
        let exitCode: number | undefined;
        for (let at = 0; at + 5 <= body.length; ) {
          const flags = body[at]!;
          const len = body.readUInt32BE(at + 1);
          const msg = JSON.parse(body.subarray(at + 5, at + 5 + len).toString("utf8")) as {
            event?: { end?: { exitCode?: number } };
            error?: { message?: string };
          };
          if (flags & 2 && msg.error) return reject(new Error(`raw Start /bin/true: ${msg.error.message}`));
          if (msg.event?.end) exitCode = msg.event.end.exitCode ?? 0;
          at += 5 + len;
        }
        if (res.statusCode !== 200 || exitCode !== 0) {
          return reject(new Error(`raw Start /bin/true: HTTP ${res.statusCode}, exit code ${exitCode}`));
        }
        resolve();
      });
    });
    req.end(RAW_START);
  });
}

interface Variant {
  name: string;
  run: () => Promise<void>;
  times: number[];
  envdCpu: number;
  selfCpu: number;
}

/**
 * Exec round trip: Start `/bin/true` through envd (Connect JSON over
 * HTTP/1.1, as the E2B SDKs do; Connect binary for information) against
 * spawning it locally, interleaved so load changes hit every variant alike.
 */
export async function benchExec(): Promise<GoalResult[]> {
  const n = envInt("LOCALE2B_BENCH_EXEC_N", 200);
  const warmup = envInt("LOCALE2B_BENCH_WARMUP", 20);
  heading(`exec: round trip of /bin/true (N=${n} each after ${warmup} warm-up, interleaved)`);

  const envd = await startEnvdChild();
  try {
    const json = processClient(envd.url, false);
    const binary = processClient(envd.url, true);
    const variants: Variant[] = [
      { name: "local spawn('/bin/true') to close", run: localTrue, times: [], envdCpu: 0, selfCpu: 0 },
      { name: "envd Start, Connect JSON, HTTP/1.1", run: () => envdTrue(json), times: [], envdCpu: 0, selfCpu: 0 },
      { name: "envd Start, Connect binary, HTTP/1.1", run: () => envdTrue(binary), times: [], envdCpu: 0, selfCpu: 0 },
      { name: "envd Start, Connect JSON hand-framed, node:http", run: () => rawTrue(envd.url), times: [], envdCpu: 0, selfCpu: 0 },
    ];
    for (let i = 0; i < warmup; i++) for (const v of variants) await v.run();
    globalThis.gc?.();
    for (let i = 0; i < n; i++) {
      // Rotate the order each round so no variant always runs first.
      for (let k = 0; k < variants.length; k++) {
        const v = variants[(i + k) % variants.length]!;
        const c0 = processCpuSeconds(envd.pid);
        const s0 = selfCpuSeconds();
        const t0 = performance.now();
        await v.run();
        v.times.push(msSince(t0));
        v.selfCpu += selfCpuSeconds() - s0;
        v.envdCpu += processCpuSeconds(envd.pid) - c0;
      }
    }

    const base = median(variants[0]!.times);
    const goals = ["baseline", `<= ${GOAL_RATIO}x`, "(information)", "(information)"];
    printTable(
      ["variant", "median", "p95", "ratio", "goal", "envd CPU/call", "this process CPU/call"],
      variants.map((v, i) => [
        v.name,
        fmtMs(median(v.times)),
        fmtMs(p95(v.times)),
        fmtRatio(median(v.times) / base),
        goals[i]!,
        i === 0 ? "-" : fmtMs((v.envdCpu / n) * 1000),
        fmtMs((v.selfCpu / n) * 1000),
      ]),
    );
    const ratio = median(variants[1]!.times) / base;
    console.log(`ratio = envd median / local median. Connect JSON: ${fmtRatio(ratio)} (goal <= ${GOAL_RATIO}x: ${verdict(ratio <= GOAL_RATIO)})`);
    console.log(
      `hand-framed: the same Connect JSON Start written and parsed with node:http alone; the gap to the JSON row is the Connect client library.\n` +
        `CPU/call: user+system time of envd (not of /bin/true) and of this benchmark process (the client, or the local spawner), averaged over the calls.\n` +
        `fork() cost grows with the forking process's RSS: envd VmRSS ${fmtMiB(readRss(envd.pid))}, this process ${fmtMiB(process.memoryUsage().rss)}.`,
    );
    return [{ benchmark: "exec", metric: "Start /bin/true, Connect JSON vs local spawn", value: fmtRatio(ratio), goal: `<= ${GOAL_RATIO}x`, ok: ratio <= GOAL_RATIO }];
  } finally {
    await envd.stop();
  }
}
