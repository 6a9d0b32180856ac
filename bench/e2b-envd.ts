import { Sandbox } from "e2b";
import { spawn } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { envdTrue } from "./exec.js";
import { createSource, download, upload } from "./files.js";
import { onCleanup } from "./lib/cleanup.js";
import { processClient } from "./lib/clients.js";
import { processCpuSeconds, spawnHelperPid } from "./lib/cpu.js";
import { ensureEnvdBundle } from "../control-plane/images/envd-bundle.js";
import { ensureInitBinary } from "../control-plane/images/guest-init.js";
import { GUEST, imagesDir } from "../control-plane/images/layout.js";
import { e2bEnvdBinary, startE2bEnvd } from "./lib/e2b-envd.js";
import { startEnvdChild, type EnvdChild } from "./lib/envd.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtBytes, fmtMiB, fmtMs, fmtRate, fmtRatio, heading, printTable } from "./lib/report.js";
import { readRss, readRssParts, RssSampler } from "./lib/rss.js";
import { median, mibPerSec, msSince } from "./lib/stats.js";
import { viaEnvd } from "./stream.js";

const WARMUP_BYTES = 16 * 1024 * 1024;
/** GET /health is tried this often while an envd starts, so start-up is timed to a few ms. */
const STARTUP_POLL_MS = 5;
/** Idle RSS is read this long after the first /health answer. */
const IDLE_SETTLE_MS = 1000;

type Unit = "ms" | "rate" | "bytes" | "cpu";

/** One row of the table: a value per round, per envd. */
interface Measure {
  name: string;
  unit: Unit;
  values: Record<Side["name"], number[]>;
}

interface Side {
  name: "E2B envd" | "ours";
  start: () => Promise<EnvdChild>;
}

/**
 * E2B's Go envd beside ours: both started fresh each round (order
 * alternating), driven by the same clients (connect-node over HTTP/1.1 as
 * the SDK, JSON and binary; node:http for /files; the E2B SDK itself for
 * commands.run), medians over the rounds.
 */
export async function benchE2bEnvd(): Promise<GoalResult[]> {
  const rounds = envInt("LOCALE2B_BENCH_E2B_ROUNDS", 3);
  const bytes = envInt("LOCALE2B_BENCH_BYTES", 1024 ** 3);
  const n = envInt("LOCALE2B_BENCH_EXEC_N", 200);
  const warmup = envInt("LOCALE2B_BENCH_WARMUP", 20);
  const sdkN = envInt("LOCALE2B_BENCH_E2B_SDK_N", 50);
  heading(`e2b-envd: E2B's Go envd beside ours, ${rounds} rounds (fresh envds, order alternating), median`);

  const e2b = await e2bEnvdBinary();
  // Without E2B's envd, ours is still measured and the baseline column says why it is missing.
  const skipped = "skipped" in e2b ? `skipped: ${e2b.skipped}` : undefined;
  if ("skipped" in e2b) console.log(`E2B envd: ${skipped}`);
  // Ours as sandboxes run it: the esbuild bundle (one file, native addons beside it), not the CLI.
  const bundle = await ensureEnvdBundle(imagesDir());
  // What the init gives envd in every sandbox (rootfs/init/spawn.c); E2B's envd ignores it.
  process.env.LOCALE2B_SPAWN_HELPER = await ensureInitBinary(imagesDir());
  if (!("skipped" in e2b)) console.log(`E2B envd: ${e2b.bin} (${e2b.label}), -isnotfc -no-cgroups; ours: the envd bundle sandboxes run (${bundle.entry})`);
  console.log(`per round and envd: start, idle RSS, ${n}+${n} exec (JSON, binary, after ${warmup} warm-up), ${sdkN} SDK commands.run, ` +
    `stdout stream of ${fmtBytes(bytes)} (JSON, binary), upload and download of ${fmtBytes(bytes)}`);

  const dir = await mkdtemp(join(tmpdir(), "locale2b-bench-e2b-"));
  const forget = onCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const src = join(dir, "source.bin");
  const warm = join(dir, "warm.bin");
  const out = join(dir, "out.bin");
  // bash -l reads $HOME/.profile: a neutral HOME keeps a test machine's profile out of commands.run.
  const home = join(dir, "home");
  mkdirSync(home);
  await createSource(src, bytes);
  await createSource(warm, Math.min(bytes, WARMUP_BYTES));

  const sides: Side[] = [
    ...("bin" in e2b ? [{ name: "E2B envd" as const, start: () => startE2bEnvd(e2b.bin, STARTUP_POLL_MS) }] : []),
    { name: "ours", start: () => startEnvdChild(15_000, STARTUP_POLL_MS, bundle.entry) },
  ];
  // One throwaway start of each: loads the client's fetch (about 0.5 s the first time) and both binaries into the page cache.
  for (const side of sides) await (await side.start()).stop();
  const measures: Measure[] = [];
  const measure = (name: string, unit: Unit): Measure => {
    const m: Measure = { name, unit, values: { "E2B envd": [], ours: [] } };
    measures.push(m);
    return m;
  };
  const execJson = measure("exec /bin/true, Connect JSON (median)", "ms");
  const execBinary = measure("exec /bin/true, Connect binary (median)", "ms");
  const execCpu = measure("envd CPU per exec", "ms");
  const sdkRun = measure("SDK commands.run('true') p50", "ms");
  const streamJson = measure("stdout stream, Connect JSON", "rate");
  const streamBinary = measure("stdout stream, Connect binary", "rate");
  const streamRss = measure("envd peak RSS while streaming", "bytes");
  const up = measure(`upload ${fmtBytes(bytes)}, POST /files octet-stream`, "rate");
  const down = measure(`download ${fmtBytes(bytes)}, GET /files`, "rate");
  const upCpu = measure("envd CPU per GiB uploaded", "cpu");
  const downCpu = measure("envd CPU per GiB downloaded", "cpu");
  const startup = measure("start-up (spawn to first /health 2xx)", "ms");
  const idleRss = measure("idle RSS after start", "bytes");
  const idleAnon = measure("  of which private (RssAnon)", "bytes");

  try {
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? sides : [...sides].reverse();
      for (const side of order) {
        const s = side.name;
        globalThis.gc?.();
        const envd = await side.start();
        try {
          startup.values[s].push(envd.startupMs);
          await new Promise((r) => setTimeout(r, IDLE_SETTLE_MS));
          idleRss.values[s].push(readRss(envd.pid));
          idleAnon.values[s].push(readRssParts(envd.pid).anon);

          const json = processClient(envd.url, false);
          const binary = processClient(envd.url, true);
          const sdk = await Sandbox.connect("bench", { debug: true, sandboxUrl: envd.url });
          const sdkRunTrue = async () => {
            const r = await sdk.commands.run("true", { envs: { HOME: home } });
            if (r.exitCode !== 0) throw new Error(`commands.run('true') exited ${r.exitCode}`);
          };

          for (let i = 0; i < warmup; i++) {
            await envdTrue(json);
            await envdTrue(binary);
          }
          const jsonTimes: number[] = [];
          const binaryTimes: number[] = [];
          // Ours starts its processes through the init's spawn helper, as in a sandbox: its CPU is envd's too.
          const helper = spawnHelperPid(envd.pid);
          const cpu = () => processCpuSeconds(envd.pid) + (helper ? processCpuSeconds(helper) : 0);
          const c0 = cpu();
          for (let i = 0; i < n; i++) {
            // Alternate which format goes first.
            const pair: [Parameters<typeof envdTrue>[0], number[]][] = [[json, jsonTimes], [binary, binaryTimes]];
            if (i % 2) pair.reverse();
            for (const [client, times] of pair) {
              const t0 = performance.now();
              await envdTrue(client);
              times.push(msSince(t0));
            }
          }
          execCpu.values[s].push(((cpu() - c0) / (2 * n)) * 1000);
          execJson.values[s].push(median(jsonTimes));
          execBinary.values[s].push(median(binaryTimes));

          for (let i = 0; i < Math.min(5, sdkN); i++) await sdkRunTrue();
          const sdkTimes: number[] = [];
          for (let i = 0; i < sdkN; i++) {
            const t0 = performance.now();
            await sdkRunTrue();
            sdkTimes.push(msSince(t0));
          }
          sdkRun.values[s].push(median(sdkTimes));

          let peak = 0;
          for (const [client, m] of [[json, streamJson], [binary, streamBinary]] as const) {
            await viaEnvd(client, Math.min(bytes, WARMUP_BYTES));
            globalThis.gc?.();
            const sampler = await RssSampler.start(envd.pid);
            const t0 = performance.now();
            let got: number;
            try {
              got = await viaEnvd(client, bytes);
            } finally {
              peak = Math.max(peak, (await sampler.stop()).peak);
            }
            if (got !== bytes) throw new Error(`${s} stream: received ${got} bytes, expected ${bytes}`);
            m.values[s].push(mibPerSec(bytes, msSince(t0)));
          }
          streamRss.values[s].push(peak);

          await upload(envd.url, warm, out, Math.min(bytes, WARMUP_BYTES));
          await rm(out, { force: true });
          // envd and what it waited for (ours: the --receive receiver of a large upload, the --sendfile sender of a download).
          const filesCpu = () => processCpuSeconds(envd.pid, { reapedChildren: true });
          const gib = bytes / 2 ** 30;
          let cpu0 = filesCpu();
          let t0 = performance.now();
          await upload(envd.url, src, out, bytes);
          up.values[s].push(mibPerSec(bytes, msSince(t0)));
          upCpu.values[s].push((filesCpu() - cpu0) / gib);
          await rm(out, { force: true });
          await download(envd.url, warm, out, Math.min(bytes, WARMUP_BYTES));
          await rm(out, { force: true });
          cpu0 = filesCpu();
          t0 = performance.now();
          await download(envd.url, src, out, bytes);
          down.values[s].push(mibPerSec(bytes, msSince(t0)));
          downCpu.values[s].push((filesCpu() - cpu0) / gib);
          await rm(out, { force: true });
        } catch (err) {
          throw new Error(`${s}, round ${round + 1}: ${err instanceof Error ? err.message : String(err)}\n${envd.stderrTail().slice(-1000)}`);
        } finally {
          await envd.stop();
        }
        console.log(`  round ${round + 1}/${rounds}  ${s.padEnd(8)}  exec JSON ${fmtMs(execJson.values[s].at(-1)!)}, ` +
          `stream JSON ${fmtRate(streamJson.values[s].at(-1)!)}, binary ${fmtRate(streamBinary.values[s].at(-1)!)}, ` +
          `upload ${fmtRate(up.values[s].at(-1)!)}, download ${fmtRate(down.values[s].at(-1)!)}`);
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
    forget();
  }

  const floor = await nodeFloor();
  const fmt = (unit: Unit, v: number) => (unit === "ms" ? fmtMs(v) : unit === "rate" ? fmtRate(v) : unit === "cpu" ? `${v.toFixed(2)} s` : fmtMiB(v));
  console.log("");
  printTable(
    ["measure", "E2B envd", "ours", "ratio"],
    measures.map((m) => {
      const o = median(m.values.ours);
      if (skipped) return [m.name, "skipped", fmt(m.unit, o), "-"];
      const e = median(m.values["E2B envd"]);
      return [m.name, fmt(m.unit, e), fmt(m.unit, o), fmtRatio(o / e)];
    }),
  );
  console.log(
    "ratio = ours / E2B envd (for MiB/s higher is better for ours; for ms, s and MiB lower is). Each value is the median over the\n" +
      "rounds of that round's value (exec and SDK: the round's median latency). envd CPU: user+system of the envd process itself\n" +
      "and, for ours, of the spawn helper that starts its processes (not of the commands) over all exec calls; per GiB of files: of envd\n" +
      "and the children it waited for (ours: `locale2b-init --receive` of a large upload, `--sendfile` of a download). Peak RSS: the highest VmRSS sampled every 50 ms during both streams.\n" +
      "commands.run: the E2B SDK (debug mode, sandboxUrl = that envd) runs `bash -l -c true` with HOME set to an empty directory.",
  );
  const e2bIdle = skipped ? undefined : median(idleRss.values["E2B envd"]);
  console.log(
    `Node's floor, measured now: this node with envd's flags and an empty event loop idles at ${fmtMiB(floor.rss)} ` +
      `(private ${fmtMiB(floor.anon)}, the rest its binary's shared pages)` +
      (e2bIdle ? `, ${fmtRatio(floor.rss / e2bIdle)} E2B envd's idle RSS: no envd on Node idles below that.` : "."),
  );
  if (skipped) {
    console.log(`E2B envd ${skipped}`);
    return [{ benchmark: "e2b-envd", metric: "E2B envd baseline", value: "skipped", goal: "(information)", ok: true, notApplicable: skipped }];
  }
  const rate = (m: Measure) => median(m.values.ours) / median(m.values["E2B envd"]);
  return [
    { benchmark: "e2b-envd", metric: "exec /bin/true Connect JSON, ours / E2B", value: fmtRatio(rate(execJson)), goal: "(information)", ok: true, notApplicable: "information" },
    { benchmark: "e2b-envd", metric: "stdout stream Connect binary, ours / E2B", value: fmtRatio(rate(streamBinary)), goal: "(information)", ok: true, notApplicable: "information" },
  ];
}

/** The idle RSS of a bare node (envd's flags, an empty event loop) after the same settling time: Node's own floor. */
async function nodeFloor(): Promise<{ rss: number; anon: number }> {
  const child = spawn(process.execPath, [...GUEST.nodeFlags, "-e", "setInterval(() => {}, 1 << 30)"], { stdio: "ignore" });
  const forget = onCleanup(() => child.kill("SIGKILL"));
  try {
    await new Promise((r) => setTimeout(r, IDLE_SETTLE_MS + 200));
    return { rss: readRss(child.pid!), anon: readRssParts(child.pid!).anon };
  } finally {
    child.kill("SIGKILL");
    forget();
  }
}
