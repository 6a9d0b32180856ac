import type { Client } from "@connectrpc/connect";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { Process } from "../gen/ts/process/process_pb.js";
import { findExecutable } from "../control-plane/host/executables.js";
import { request, startControlPlaneChild, waitForWarmPools, type ControlPlaneChild, type SandboxHandle } from "./lib/control-plane.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable } from "./lib/report.js";
import { processTable, sandboxPids, sumMemory } from "./lib/procmem.js";
import { proxyClient, startTrue } from "./lib/sandboxes.js";
import { median } from "./lib/stats.js";
import { READY_CMD, startAndWatch } from "./sandboxes/create.js";

/**
 * `npm run bench -- runtimes`: the gvisor runtime beside the process runtime
 * (the default), each on its own `locale2b serve` (no warm pool) in the same
 * run: create -> first output, exec round trip and a 64 MiB stdout stream
 * through the proxy, an idle sandbox's memory (PSS of its processes), pause
 * (in memory on process, to disk on gvisor) per GiB of sandbox memory and
 * resume -> first output, fork of 1 and of 5, a snapshot's size on disk. gvisor is skipped, and says
 * why, where runsc is not installed.
 */

const MiB = 1024 * 1024;

/** ms from `t0` to the first stdout of `bash -l -c 'echo ready'` (what the create bench runs). */
async function firstOutput(client: Client<typeof Process>, t0: number): Promise<number> {
  const { firstStdout } = await startAndWatch(client, READY_CMD);
  if (firstStdout === undefined) throw new Error("`echo ready` printed nothing");
  return firstStdout - t0;
}

async function streamMiBs(client: Client<typeof Process>, bytes: number): Promise<number> {
  const t0 = performance.now();
  let got = 0;
  for await (const res of client.start({ process: { cmd: "/bin/sh", args: ["-c", `head -c ${bytes} /dev/zero`] }, stdin: false })) {
    const e = res.event?.event;
    if (e?.case === "data" && e.value.output.case === "stdout") got += e.value.output.value.length;
  }
  if (got !== bytes) throw new Error(`stream: ${got} of ${bytes} bytes`);
  return bytes / MiB / ((performance.now() - t0) / 1000);
}

interface Row {
  createFirst: number;
  /** gvisor: creates restored from the warm-start image (NaN where there is none). */
  warmFirst: number;
  /** With a warm pool of 2 (restored sandboxes on gvisor): the create call, and create -> first output. */
  poolCall: number;
  poolFirst: number;
  exec: number;
  stream: number;
  pssMiB: number;
  pauseMs: number;
  resumeFirst: number;
  /** The sandbox's memory (PSS of its processes) when it was paused, with FILL_MIB of data in it. */
  pausedMiB: number;
  fork1: number;
  fork5: number;
  /** A snapshot's files on disk (memory snapshot where the runtime takes one). */
  snapshotMiB: number;
}

/** Data the pause and snapshot rows carry in the sandbox's memory (random bytes a process holds). */
const FILL_MIB = 256;

function duBytes(dir: string): number {
  const out = execFileSync("du", ["-s", "-B1", dir], { encoding: "utf8" }); // blocks used: sparse images count what they hold
  return Number(out.split(/\s/)[0]);
}

async function api(cp: ControlPlaneChild, method: string, path: string, body: unknown, ok: number[]): Promise<string> {
  const r = await request(`${cp.url}${path}`, method, { "X-API-Key": cp.apiKey }, body);
  if (!ok.includes(r.status)) throw new Error(`${method} ${path} answered ${r.status}: ${r.body.slice(0, 200)}`);
  return r.body;
}

/** ms until a fork of `count` answered (every fork started and its envd answered). */
async function forkMs(cp: ControlPlaneChild, id: string, count: number): Promise<number> {
  const t0 = performance.now();
  const body = JSON.parse(await api(cp, "POST", `/sandboxes/${id}/fork`, { count, timeout: 300 }, [201])) as { sandbox?: { sandboxID: string } }[];
  const ms = performance.now() - t0;
  const ids = body.map((f) => f.sandbox?.sandboxID).filter((x): x is string => !!x);
  if (ids.length !== count) throw new Error(`fork of ${count}: ${ids.length} started`);
  for (const f of ids) await cp.deleteSandbox(f);
  return ms;
}

async function createsMs(cp: ControlPlaneChild, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const sb = await cp.createSandbox(600);
    out.push(await firstOutput(proxyClient(cp, sb), t0));
    await cp.deleteSandbox(sb.id);
  }
  return out;
}

/** With the server's warm pool full before each: the create call alone, and create -> first output (ms). */
async function warmPoolCreates(cp: ControlPlaneChild, n: number, pool: number): Promise<{ call: number[]; first: number[] }> {
  const call: number[] = [];
  const first: number[] = [];
  const pools = [{ url: cp.url, headers: { "X-API-Key": cp.apiKey } }];
  for (let i = 0; i < n; i++) {
    if (!(await waitForWarmPools(pools, pool, 120_000))) throw new Error(`the warm pool did not fill to ${pool} within 120 s`);
    const t0 = performance.now();
    const sb = await cp.createSandbox(600);
    call.push(performance.now() - t0);
    first.push(await firstOutput(proxyClient(cp, sb), t0));
    await cp.deleteSandbox(sb.id);
  }
  return { call, first };
}

/** gvisor builds a warm-start image after its first cold create: true once there is one. */
async function warmImageBuilt(cp: ControlPlaneChild): Promise<boolean> {
  const dir = join(cp.dataDir, "gvisor-warm");
  for (let i = 0; i < 600; i++) {
    if (existsSync(dir) && readdirSync(dir).some((d) => !d.startsWith("."))) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

async function measure(cp: ControlPlaneChild, n: number): Promise<Row> {
  // Cold: the first warms the server; gvisor's warm start is off for these (LOCALE2B_GVISOR_WARM_START=0 server).
  const creates = (await createsMs(cp, n + 1)).slice(1);
  const sb: SandboxHandle = await cp.createSandbox(600);
  const client = proxyClient(cp, sb, true);
  const execs: number[] = [];
  for (let i = 0; i < 5 * n + 5; i++) {
    const t0 = performance.now();
    await startTrue(client);
    if (i >= 5) execs.push(performance.now() - t0);
  }
  await new Promise((r) => setTimeout(r, 2_000)); // idle, before any big stream grows envd's heap
  const pss = sumMemory(sandboxPids(sb.id, sb.dir, processTable()).pids).pss;
  const streams: number[] = [];
  for (let i = 0; i < 3; i++) streams.push(await streamMiBs(client, 64 * MiB));
  // Memory worth saving: a process holding FILL_MIB of random bytes, running on.
  const hold = `import os, time; b = os.urandom(${FILL_MIB} << 20); open("/tmp/filled", "w").close(); time.sleep(3600)`;
  const fill = `setsid nohup python3 -c '${hold}' </dev/null >/dev/null 2>&1 & for i in $(seq 300); do [ -e /tmp/filled ] && break; sleep 0.1; done; echo filled`;
  const filled = await startAndWatch(client, { ...READY_CMD, args: ["-c", fill] });
  if (filled.exitCode !== 0) throw new Error(`filling the sandbox's memory exited ${filled.exitCode}`);
  const pausedMiB = sumMemory(sandboxPids(sb.id, sb.dir, processTable()).pids).pss / MiB;
  const pauses: number[] = [];
  const resumes: number[] = [];
  for (let i = 0; i < 3; i++) {
    let t0 = performance.now();
    const p = await request(`${cp.url}/sandboxes/${sb.id}/pause`, "POST", { "X-API-Key": cp.apiKey }, {});
    if (p.status !== 204) throw new Error(`pause answered ${p.status}: ${p.body.slice(0, 200)}`);
    pauses.push(performance.now() - t0);
    t0 = performance.now();
    const c = await request(`${cp.url}/sandboxes/${sb.id}/connect`, "POST", { "X-API-Key": cp.apiKey }, { timeout: 600 });
    if (c.status !== 201 && c.status !== 200) throw new Error(`connect answered ${c.status}: ${c.body.slice(0, 200)}`);
    resumes.push(await firstOutput(proxyClient(cp, sb), t0));
  }
  const fork1 = median([await forkMs(cp, sb.id, 1), await forkMs(cp, sb.id, 1), await forkMs(cp, sb.id, 1)]);
  const fork5 = await forkMs(cp, sb.id, 5);
  const snap = JSON.parse(await api(cp, "POST", `/sandboxes/${sb.id}/snapshots`, {}, [201])) as { snapshotID: string };
  const snapshotMiB = duBytes(join(cp.dataDir, "snapshots")) / MiB;
  await api(cp, "DELETE", `/templates/${encodeURIComponent(snap.snapshotID)}`, undefined, [204]);
  await cp.deleteSandbox(sb.id);
  return {
    createFirst: median(creates),
    warmFirst: NaN,
    poolCall: NaN,
    poolFirst: NaN,
    exec: median(execs),
    stream: median(streams),
    pssMiB: pss / MiB,
    pauseMs: median(pauses),
    resumeFirst: median(resumes),
    pausedMiB,
    fork1,
    fork5,
    snapshotMiB,
  };
}

/** The warm pool the pooled-create rows keep (serve's default on the process runtime). */
const POOL = 2;

export async function benchRuntimes(): Promise<GoalResult[]> {
  const n = envInt("LOCALE2B_BENCH_RUNTIMES_N", 8);
  heading(`runtimes: gvisor beside process (each its own server, no warm pool; N=${n} creates, ${5 * n} execs, 3 streams of 64 MiB, 3 pause/resume)`);
  const rows: Record<string, Row> = {};
  const runtimes = ["process", ...(findExecutable("runsc") ? ["gvisor"] : [])];
  if (runtimes.length === 1) console.log("gvisor: skipped (no runsc: scripts/setup-host installs it)");
  for (const runtime of runtimes) {
    // Cold creates: gvisor's warm start (a restore of a checkpointed envd) is measured on its own server below.
    process.env.LOCALE2B_GVISOR_WARM_START = "0";
    const cp = await startControlPlaneChild({ extraArgs: ["--runtime", runtime, "--warm-pool", "0"], timeoutMs: 60_000 });
    delete process.env.LOCALE2B_GVISOR_WARM_START;
    try {
      rows[runtime] = await measure(cp, n);
    } finally {
      await cp.stop();
    }
    const pooled = await startControlPlaneChild({ extraArgs: ["--runtime", runtime, "--warm-pool", String(POOL)], timeoutMs: 60_000 });
    try {
      const { call, first } = await warmPoolCreates(pooled, n, POOL);
      rows[runtime]!.poolCall = median(call);
      rows[runtime]!.poolFirst = median(first);
    } finally {
      await pooled.stop();
    }
    if (runtime !== "gvisor") continue;
    const warm = await startControlPlaneChild({ extraArgs: ["--runtime", runtime, "--warm-pool", "0"], timeoutMs: 60_000 });
    try {
      await createsMs(warm, 1); // cold: builds the warm-start image in the background
      if (await warmImageBuilt(warm)) rows[runtime]!.warmFirst = median(await createsMs(warm, n));
      else console.log("gvisor: no warm-start image within 60 s (see the server's log)");
    } finally {
      await warm.stop();
    }
  }
  const p = rows.process!;
  const g = rows.gvisor;
  const line = (name: string, f: (r: Row) => number, fmt: (v: number) => string) => [name, fmt(f(p)), g ? fmt(f(g)) : "-", g ? fmtRatio(f(g) / f(p)) : "-"];
  const mibs = (v: number) => `${v.toFixed(0)} MiB/s`;
  const mib = (v: number) => `${v.toFixed(1)} MiB`;
  printTable(
    ["measure (medians)", "process", "gvisor", "gvisor / process"],
    [
      line("create -> first output of `bash -l -c 'echo ready'`", (r) => r.createFirst, fmtMs),
      ["same, gvisor restored from its warm-start checkpoint", "-", g && !Number.isNaN(g.warmFirst) ? fmtMs(g.warmFirst) : "-", g && !Number.isNaN(g.warmFirst) ? fmtRatio(g.warmFirst / p.createFirst) : "-"],
      line(`create call, warm pool of ${POOL} full (gvisor: restored sandboxes)`, (r) => r.poolCall, fmtMs),
      line(`create -> first output, warm pool of ${POOL} full`, (r) => r.poolFirst, fmtMs),
      line("exec round trip (/bin/true, Connect binary, via proxy)", (r) => r.exec, fmtMs),
      line("stdout stream, 64 MiB (Connect binary, via proxy)", (r) => r.stream, mibs),
      line("idle sandbox memory (PSS of its processes, after a few execs)", (r) => r.pssMiB, mib),
      line(`sandbox memory at pause (${FILL_MIB} MiB of data in it)`, (r) => r.pausedMiB, mib),
      line("pause (process: in memory; gvisor: to disk, memory freed)", (r) => r.pauseMs, fmtMs),
      line("pause per GiB of sandbox memory", (r) => r.pauseMs / (r.pausedMiB / 1024), fmtMs),
      line("connect (resume) -> first output", (r) => r.resumeFirst, fmtMs),
      line("fork of 1 (process: files only; gvisor: memory, processes go on)", (r) => r.fork1, fmtMs),
      line("fork of 5", (r) => r.fork5, fmtMs),
      line("snapshot on disk (process: files; gvisor: memory + files)", (r) => r.snapshotMiB, mib),
      line("snapshot on disk per GiB of sandbox memory", (r) => r.snapshotMiB / (r.pausedMiB / 1024), mib),
    ],
  );
  console.log("E2B publishes about 4 s per GiB to pause and about 1 s to resume (Firecracker snapshots).");
  return g
    ? [
        { benchmark: "runtimes", metric: "gvisor create -> first output (cold)", value: fmtMs(g.createFirst), goal: "-", ok: true },
        { benchmark: "runtimes", metric: "gvisor create -> first output (warm start)", value: Number.isNaN(g.warmFirst) ? "-" : fmtMs(g.warmFirst), goal: "-", ok: true },
        { benchmark: "runtimes", metric: `gvisor create call, warm pool of ${POOL}`, value: fmtMs(g.poolCall), goal: "<= 30 ms", ok: g.poolCall <= 30 },
      ]
    : [];
}
