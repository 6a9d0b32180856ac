import type { Client } from "@connectrpc/connect";
import { spawn } from "node:child_process";
import type { Process } from "../gen/ts/process/process_pb.js";
import { processClient } from "./lib/clients.js";
import { processCpuSeconds, selfCpuSeconds } from "./lib/cpu.js";
import { startEnvdChild } from "./lib/envd.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtBytes, fmtMiB, fmtRate, fmtRatio, heading, printTable, verdict } from "./lib/report.js";
import { RssSampler, type RssPeak } from "./lib/rss.js";
import { max, median, mibPerSec, min, msSince } from "./lib/stats.js";

const GOAL_JSON = 0.5;
const GOAL_BINARY = 0.8;
const WARMUP_BYTES = 16 * 1024 * 1024;

/** Baseline: `head -c N /dev/zero` spawned here, its stdout pipe read in this process. */
function rawPipe(bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn("head", ["-c", String(bytes), "/dev/zero"], { stdio: ["ignore", "pipe", "ignore"] });
    let got = 0;
    child.stdout!.on("data", (chunk: Buffer) => {
      got += chunk.length;
    });
    child.once("error", reject);
    child.once("close", (code) => (code === 0 ? resolve(got) : reject(new Error(`head exited ${code}`))));
  });
}

/** The same command through envd's Start, counting stdout bytes until the end event. */
export async function viaEnvd(client: Client<typeof Process>, bytes: number): Promise<number> {
  let got = 0;
  let exitCode: number | undefined;
  const stream = client.start({ process: { cmd: "head", args: ["-c", String(bytes), "/dev/zero"] }, stdin: false });
  for await (const res of stream) {
    const e = res.event?.event;
    if (e?.case === "data" && e.value.output.case === "stdout") got += e.value.output.value.length;
    else if (e?.case === "end") exitCode = e.value.exitCode;
  }
  if (exitCode !== 0) throw new Error(`Start head: no end event with exit code 0 (got ${exitCode})`);
  return got;
}

interface Variant {
  name: string;
  run: (bytes: number) => Promise<number>;
  /** Goal as a ratio to the raw pipe; undefined for information only. */
  goal: number | undefined;
  /** Runs through envd: sample its RSS and CPU. */
  envd: boolean;
  rates: number[];
  rss: RssPeak[];
  /** CPU seconds per GiB, per repetition. */
  envdCpu: number[];
  selfCpu: number[];
}

/**
 * stdout throughput: a large `head -c N /dev/zero` streamed through Start
 * (Connect JSON and binary over HTTP/1.1) against reading the same pipe
 * locally, with envd's RSS sampled during each envd run.
 */
export async function benchStream(): Promise<GoalResult[]> {
  const bytes = envInt("LOCALE2B_BENCH_BYTES", 1024 ** 3);
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  const gzip = process.env.LOCALE2B_BENCH_GZIP === "1";
  heading(`stream: stdout throughput of ${fmtBytes(bytes)} (head -c ${bytes} /dev/zero), ${reps} repetitions, median`);

  const envd = await startEnvdChild();
  try {
    const variant = (name: string, run: Variant["run"], goal: number | undefined, viaEnvd: boolean): Variant => ({
      name, run, goal, envd: viaEnvd, rates: [], rss: [], envdCpu: [], selfCpu: [],
    });
    const json = processClient(envd.url, false);
    const binary = processClient(envd.url, true);
    const variants: Variant[] = [
      variant("raw pipe (spawn head, read here)", rawPipe, undefined, false),
      variant("envd Start, Connect JSON, HTTP/1.1", (b) => viaEnvd(json, b), GOAL_JSON, true),
      variant("envd Start, Connect binary, HTTP/1.1", (b) => viaEnvd(binary, b), GOAL_BINARY, true),
    ];
    if (gzip) {
      // connect-node's default: the client accepts gzip, so envd compresses every message.
      const jsonGz = processClient(envd.url, false, true);
      const binaryGz = processClient(envd.url, true, true);
      variants.push(
        variant("envd Start, Connect JSON, client accepts gzip", (b) => viaEnvd(jsonGz, b), undefined, true),
        variant("envd Start, Connect binary, client accepts gzip", (b) => viaEnvd(binaryGz, b), undefined, true),
      );
    }
    for (const v of variants) await v.run(Math.min(bytes, WARMUP_BYTES));

    const gib = bytes / 1024 ** 3;
    const width = Math.max(...variants.map((v) => v.name.length));
    for (let rep = 0; rep < reps; rep++) {
      for (let k = 0; k < variants.length; k++) {
        const v = variants[(rep + k) % variants.length]!;
        globalThis.gc?.();
        const sampler = v.envd ? await RssSampler.start(envd.pid) : undefined;
        const c0 = processCpuSeconds(envd.pid);
        const s0 = selfCpuSeconds();
        const t0 = performance.now();
        let got: number;
        try {
          got = await v.run(bytes);
        } finally {
          const p = await sampler?.stop();
          if (p) v.rss.push(p);
        }
        const ms = msSince(t0);
        if (got !== bytes) throw new Error(`${v.name}: received ${got} bytes, expected ${bytes}`);
        v.rates.push(mibPerSec(bytes, ms));
        v.selfCpu.push((selfCpuSeconds() - s0) / gib);
        if (v.envd) v.envdCpu.push((processCpuSeconds(envd.pid) - c0) / gib);
        const last = v.rss.at(-1);
        const note = v.envd && last ? `   envd CPU ${v.envdCpu.at(-1)!.toFixed(1)} s/GiB, RSS +${fmtMiB(last.growth)} (${last.samples} samples)` : "";
        console.log(`  rep ${rep + 1}/${reps}  ${v.name.padEnd(width)}  ${fmtRate(mibPerSec(bytes, ms)).padStart(11)}${note}`);
      }
    }

    const base = median(variants[0]!.rates);
    console.log("");
    printTable(
      ["variant", "median", "min..max", "ratio", "goal", "envd CPU", "client CPU", "envd RSS growth (median, max)"],
      variants.map((v) => [
        v.name,
        fmtRate(median(v.rates)),
        `${min(v.rates).toFixed(0)}..${max(v.rates).toFixed(0)}`,
        fmtRatio(median(v.rates) / base),
        v === variants[0] ? "baseline" : v.goal === undefined ? "(information)" : `>= ${v.goal}x`,
        v.envd ? `${median(v.envdCpu).toFixed(1)} s/GiB` : "-",
        `${median(v.selfCpu).toFixed(1)} s/GiB`,
        v.rss.length ? `${fmtMiB(median(v.rss.map((r) => r.growth)))}, ${fmtMiB(max(v.rss.map((r) => r.growth)))}` : "-",
      ]),
    );
    console.log(
      "ratio = median MiB/s / raw pipe median MiB/s. CPU = user+system seconds per GiB moved, of envd and of this process\n" +
        "(the Connect client, or the pipe reader). RSS growth = peak envd VmRSS (sampled every 50 ms) minus VmRSS at the start of that run.",
    );

    const results: GoalResult[] = [];
    for (const v of variants) {
      if (v.goal === undefined) continue;
      const ratio = median(v.rates) / base;
      const growth = max(v.rss.map((r) => r.growth));
      results.push({ benchmark: "stream", metric: `${v.name} vs raw pipe`, value: `${fmtRatio(ratio)} (${fmtRate(median(v.rates))})`, goal: `>= ${v.goal}x`, ok: ratio >= v.goal });
      console.log(`${v.name}: ${fmtRatio(ratio)} (goal >= ${v.goal}x: ${verdict(ratio >= v.goal)}), peak envd RSS growth ${fmtMiB(growth)}`);
    }
    return results;
  } finally {
    await envd.stop();
  }
}
