import { randomBytes } from "node:crypto";
import { createReadStream, createWriteStream, rmSync } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { onCleanup } from "./lib/cleanup.js";
import { processCpuSeconds, selfCpuSeconds } from "./lib/cpu.js";
import { startEnvdChild } from "./lib/envd.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtBytes, fmtMiB, fmtRate, fmtRatio, heading, printTable, verdict } from "./lib/report.js";
import { RssSampler, type RssPeak } from "./lib/rss.js";
import { max, median, mibPerSec, min, msSince } from "./lib/stats.js";

const GOAL_RATIO = 0.5;
const GOAL_RSS_BYTES = 64 * 1024 * 1024;
const WARMUP_BYTES = 16 * 1024 * 1024;

/** Writes `bytes` of incompressible data (one random MiB, repeated) to `path`. */
export async function createSource(path: string, bytes: number): Promise<void> {
  const block = randomBytes(1024 * 1024);
  async function* chunks() {
    for (let left = bytes; left > 0; left -= block.length) yield left >= block.length ? block : block.subarray(0, left);
  }
  await pipeline(Readable.from(chunks()), createWriteStream(path));
}

/** Baseline: the same bytes moved from file to file through streams in this process. */
async function streamCopy(src: string, dst: string): Promise<void> {
  await pipeline(createReadStream(src), createWriteStream(dst));
}

const agent = new http.Agent({ keepAlive: true });

/** An error that names what the /files endpoint answered. */
async function filesError(what: string, res: http.IncomingMessage): Promise<Error> {
  let body = "";
  for await (const c of res) body = (body + String(c)).slice(0, 500);
  const hint = res.statusCode === 404 || res.statusCode === 405 ? " (is /files implemented in this envd build?)" : "";
  return new Error(`${what}: HTTP ${res.statusCode}${hint}: ${body.trim()}`);
}

/** POST /files?path=dest with the file as an application/octet-stream body. */
export async function upload(base: string, src: string, dest: string, bytes: number): Promise<void> {
  const url = new URL(`/files?path=${encodeURIComponent(dest)}`, base);
  const req = http.request(url, {
    method: "POST",
    agent,
    headers: { "Content-Type": "application/octet-stream", "Content-Length": bytes },
  });
  const response = new Promise<http.IncomingMessage>((resolve, reject) => {
    req.once("response", resolve);
    req.once("error", reject);
  });
  const [sent, answered] = await Promise.allSettled([pipeline(createReadStream(src), req), response]);
  if (answered.status === "rejected") throw answered.reason;
  const res = answered.value;
  // An early error answer (e.g. 404) cuts the upload short: report the answer, not the broken pipe.
  if (res.statusCode !== 200) throw await filesError(`POST /files?path=${dest}`, res);
  if (sent.status === "rejected") throw sent.reason;
  let body = "";
  for await (const c of res) body += String(c);
  const entries = JSON.parse(body) as { path?: string }[];
  if (!Array.isArray(entries) || entries[0]?.path !== dest) throw new Error(`POST /files answered ${body}, expected [{path: '${dest}', ...}]`);
  const size = (await stat(dest)).size;
  if (size !== bytes) throw new Error(`uploaded file has ${size} bytes, expected ${bytes}`);
}

/** GET /files?path=src with no Accept-Encoding (identity), written to `dest`. */
export async function download(base: string, src: string, dest: string, bytes: number): Promise<void> {
  const url = new URL(`/files?path=${encodeURIComponent(src)}`, base);
  const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
    http.get(url, { agent }, resolve).once("error", reject);
  });
  if (res.statusCode !== 200) throw await filesError(`GET /files?path=${src}`, res);
  if (res.headers["content-encoding"] && res.headers["content-encoding"] !== "identity") {
    throw new Error(`GET /files without Accept-Encoding answered Content-Encoding: ${res.headers["content-encoding"]}`);
  }
  await pipeline(res, createWriteStream(dest));
  const size = (await stat(dest)).size;
  if (size !== bytes) throw new Error(`downloaded file has ${size} bytes, expected ${bytes}`);
}

interface Variant {
  name: string;
  run: (bytes: number) => Promise<void>;
  /** Runs through envd: sample its RSS and CPU. */
  envd: boolean;
  rates: number[];
  rss: RssPeak[];
  /** CPU seconds per GiB, per repetition. */
  envdCpu: number[];
  selfCpu: number[];
}

/**
 * 1 GiB through HTTP /files: upload (octet-stream, from a file on disk) and
 * download (identity, to a file on disk) against a local stream copy of the
 * same file, with envd's RSS sampled every 50 ms during each transfer.
 */
export async function benchFiles(): Promise<GoalResult[]> {
  const bytes = envInt("LOCALE2B_BENCH_BYTES", 1024 ** 3);
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  heading(`files: ${fmtBytes(bytes)} through HTTP /files vs a local stream copy, ${reps} repetitions, median`);

  const dir = await mkdtemp(join(tmpdir(), "locale2b-bench-"));
  const forget = onCleanup(() => rmSync(dir, { recursive: true, force: true }));
  const src = join(dir, "source.bin");
  const out = join(dir, "out.bin");
  const envd = await startEnvdChild();
  try {
    await createSource(src, bytes);
    const warm = join(dir, "warm.bin");
    await createSource(warm, Math.min(bytes, WARMUP_BYTES));

    const variant = (name: string, run: Variant["run"], viaEnvd: boolean): Variant => ({
      name, run, envd: viaEnvd, rates: [], rss: [], envdCpu: [], selfCpu: [],
    });
    const variants: Variant[] = [
      variant("local stream copy (pipeline file->file)", () => streamCopy(src, out), false),
      variant("envd upload, POST /files octet-stream", (b) => upload(envd.url, src, out, b), true),
      variant("envd download, GET /files identity", (b) => download(envd.url, src, out, b), true),
    ];
    // Warm-up: a small transfer each, so connection set-up and JIT are not measured.
    await upload(envd.url, warm, out, Math.min(bytes, WARMUP_BYTES));
    await rm(out, { force: true });
    await download(envd.url, warm, out, Math.min(bytes, WARMUP_BYTES));
    await rm(out, { force: true });

    const gib = bytes / 1024 ** 3;
    for (let rep = 0; rep < reps; rep++) {
      for (let k = 0; k < variants.length; k++) {
        const v = variants[(rep + k) % variants.length]!;
        globalThis.gc?.();
        const sampler = v.envd ? await RssSampler.start(envd.pid) : undefined;
        const c0 = processCpuSeconds(envd.pid);
        const s0 = selfCpuSeconds();
        const t0 = performance.now();
        try {
          await v.run(bytes);
        } finally {
          const p = await sampler?.stop();
          if (p) v.rss.push(p);
        }
        const rate = mibPerSec(bytes, msSince(t0));
        v.rates.push(rate);
        v.selfCpu.push((selfCpuSeconds() - s0) / gib);
        if (v.envd) v.envdCpu.push((processCpuSeconds(envd.pid) - c0) / gib);
        await rm(out, { force: true });
        const last = v.rss.at(-1);
        const note = v.envd && last ? `   envd CPU ${v.envdCpu.at(-1)!.toFixed(1)} s/GiB, RSS +${fmtMiB(last.growth)} (${last.samples} samples)` : "";
        console.log(`  rep ${rep + 1}/${reps}  ${v.name.padEnd(40)} ${fmtRate(rate).padStart(11)}${note}`);
      }
    }

    const base = median(variants[0]!.rates);
    console.log("");
    printTable(
      ["variant", "median", "min..max", "ratio", "goal", "envd CPU", "client CPU", "envd RSS growth (median, max)"],
      variants.map((v, i) => [
        v.name,
        fmtRate(median(v.rates)),
        `${min(v.rates).toFixed(0)}..${max(v.rates).toFixed(0)}`,
        fmtRatio(median(v.rates) / base),
        i === 0 ? "baseline" : `>= ${GOAL_RATIO}x, RSS <= ${fmtMiB(GOAL_RSS_BYTES)}`,
        v.envd ? `${median(v.envdCpu).toFixed(1)} s/GiB` : "-",
        `${median(v.selfCpu).toFixed(1)} s/GiB`,
        v.rss.length ? `${fmtMiB(median(v.rss.map((r) => r.growth)))}, ${fmtMiB(max(v.rss.map((r) => r.growth)))}` : "-",
      ]),
    );
    console.log(
      "ratio = median MiB/s / local copy median MiB/s. CPU = user+system seconds per GiB moved, of envd and of this process\n" +
        "(the HTTP client, or the copier). RSS growth = peak envd VmRSS (sampled every 50 ms) minus VmRSS at the start of that transfer.",
    );

    const results: GoalResult[] = [];
    for (const v of variants.slice(1)) {
      const ratio = median(v.rates) / base;
      const growth = max(v.rss.map((r) => r.growth));
      console.log(`${v.name}: ${fmtRatio(ratio)} (goal >= ${GOAL_RATIO}x: ${verdict(ratio >= GOAL_RATIO)}), peak envd RSS growth ${fmtMiB(growth)} (goal <= ${fmtMiB(GOAL_RSS_BYTES)}: ${verdict(growth <= GOAL_RSS_BYTES)})`);
      results.push({ benchmark: "files", metric: `${v.name} vs local copy`, value: `${fmtRatio(ratio)} (${fmtRate(median(v.rates))})`, goal: `>= ${GOAL_RATIO}x`, ok: ratio >= GOAL_RATIO });
      results.push({ benchmark: "files", metric: `${v.name}: envd RSS growth (max)`, value: fmtMiB(growth), goal: `<= ${fmtMiB(GOAL_RSS_BYTES)}`, ok: growth <= GOAL_RSS_BYTES });
    }
    return results;
  } finally {
    await envd.stop();
    await rm(dir, { recursive: true, force: true });
    forget();
  }
}
