import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, Template, waitForPort } from "e2b";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable } from "../lib/report.js";
import { median, quantile } from "../lib/stats.js";
import { timedBuild, type BuildPhases } from "./build.js";
import { imageNote, missing, proxiedGet, startTemplateServer, waitWarm, type TemplateServer } from "./server.js";

// 2. Create -> first output of a template with a start command (a small HTTP
// server, waitForPort): on the process runtime from its per-template warm
// pool, on gvisor restored from the checkpoint taken with the server running;
// cold creates (a create with env vars of its own starts fresh: the start
// command must see them) beside them on the same server.

const PORT = 8090;
const BODY = "served by the start command\n";

interface Sample {
  /** Sandbox.create until it returned. */
  create: number;
  /** Sandbox.create until the first byte of the answer to GET / on PORT through the proxy. */
  first: number;
  /** A second GET on the same sandbox right after: the request's own cost, once the path is open. */
  again: number;
  /** The server's own time for the create (its "sandbox created" log event). */
  server: number;
}

interface RuntimeResult {
  build: BuildPhases;
  /** The first create after the build: cold, the first sandbox of the new image (the build's start check made its files ready). */
  firstCreate: Sample;
  warm: Sample[];
  cold: Sample[];
  /** Why there are no warm samples, when there are none. */
  noWarm?: string;
}

async function createAndGet(s: TemplateServer, name: string, envs?: Record<string, string>): Promise<Sample> {
  const t0 = performance.now();
  const sbx = await Sandbox.create(name, { ...s.conn, timeoutMs: 600_000, ...(envs ? { envs } : {}) });
  const create = performance.now() - t0;
  try {
    const first = await proxiedGet(s, sbx.sandboxId, PORT, BODY, t0);
    const t1 = performance.now();
    return { create, first, again: await proxiedGet(s, sbx.sandboxId, PORT, BODY, t1), server: s.cp.createdMs.get(sbx.sandboxId) ?? NaN };
  } finally {
    await sbx.kill();
  }
}

/** gvisor: true once the warm-start checkpoint with the start command (a `-w<key>` image) is built. */
async function checkpointBuilt(s: TemplateServer, timeoutMs = 180_000): Promise<boolean> {
  const dir = join(s.cp.dataDir, "gvisor-warm");
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (existsSync(dir) && readdirSync(dir).some((d) => !d.startsWith(".") && d.includes("-w"))) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

/** One server's runtime and what makes its creates fast: a warm pool (sandboxes kept ready) or gvisor's checkpoint. */
interface Variant {
  runtime: "process" | "gvisor";
  pool: number;
  label: string;
  /** The goal of its warm p50, if it has one. */
  goalMs?: number;
  cold: boolean;
}

const VARIANTS: Variant[] = [
  { runtime: "process", pool: 1, label: "process, warm pool", goalMs: 100, cold: true },
  { runtime: "gvisor", pool: 0, label: "gvisor, checkpoint restore", goalMs: 300, cold: true },
  // Restored sandboxes kept ready (what a create can cost on gvisor when it pays no restore): opt-in, a third build.
  { runtime: "gvisor", pool: 1, label: "gvisor, warm pool", cold: false },
];

async function measure(v: Variant, warmN: number, coldN: number): Promise<RuntimeResult> {
  const s = await startTemplateServer(v.runtime, v.pool);
  try {
    const name = `bench-start-${process.pid}-${v.runtime}-${v.pool}`;
    const build = await timedBuild(
      s,
      Template()
        .fromTemplate("base")
        .runCmd(`mkdir -p /home/user/site && echo '${BODY.trim()}' > /home/user/site/index.html`)
        .setStartCmd(`cd /home/user/site && python3 -m http.server ${PORT}`, waitForPort(PORT)),
      name,
      1,
    );
    const firstCreate = await createAndGet(s, name);
    // The first create gave the template its warm pool, or (gvisor) started its checkpoint in the background.
    const pooled = v.pool > 0;
    const refilled = () => (pooled ? waitWarm(s, v.pool) : Promise.resolve(true));
    const ready = pooled ? await waitWarm(s, v.pool) : await checkpointBuilt(s);
    const result: RuntimeResult = { build, firstCreate, warm: [], cold: [] };
    if (!ready) result.noWarm = pooled ? "the warm pool did not fill within 120 s" : "no warm-start checkpoint within 180 s (see the server's log)";
    const cold = v.cold ? coldN : 0;
    for (let i = 0; i < Math.max(warmN, cold); i++) {
      if (ready && i < warmN) {
        result.warm.push(await createAndGet(s, name));
        // The next create waits for the refill (an occasional create, not a burst).
        if (!(await refilled())) throw new Error("the warm pool did not refill within 120 s");
      }
      if (i < cold) {
        result.cold.push(await createAndGet(s, name, { LOCALE2B_BENCH_COLD: String(i) }));
        if (!(await refilled())) throw new Error("the warm pool did not refill within 120 s");
      }
    }
    await s.deleteTemplate(build.templateId);
    return result;
  } finally {
    await s.stop();
  }
}

const p50 = (xs: number[]) => (xs.length ? fmtMs(median(xs)) : "-");
const p90 = (xs: number[]) => (xs.length ? fmtMs(quantile(xs, 0.9)) : "-");

export async function benchStartCommand(): Promise<GoalResult[]> {
  const warmN = envInt("LOCALE2B_BENCH_TEMPLATE_CREATES", 10);
  const coldN = envInt("LOCALE2B_BENCH_TEMPLATE_COLD", 3);
  const variants = VARIANTS.filter((v) => v.goalMs !== undefined || process.env.LOCALE2B_BENCH_TEMPLATE_GVISOR_POOL === "1");
  heading(
    `templates 2: create -> first byte of GET / on port ${PORT} through the proxy, template with a start command (python3 -m http.server, waitForPort); ${warmN} warm and ${coldN} cold creates per runtime`,
  );
  console.log(`image: ${imageNote("base")}`);
  const results = new Map<Variant, RuntimeResult>();
  for (const v of variants) {
    const why = missing(v.runtime, ["base"], { builds: true });
    if (why) {
      console.log(`${v.label}: skipped: ${why}`);
      continue;
    }
    const r = await measure(v, warmN, coldN);
    results.set(v, r);
    if (r.noWarm) console.log(`${v.label}: ${r.noWarm}`);
  }
  const rows: string[][] = [];
  const builds: string[] = [];
  for (const [v, r] of results) {
    const warm = r.warm.map((x) => x.first);
    const cold = r.cold.map((x) => x.first);
    const split = (xs: Sample[]) => [p50(xs.map((x) => x.server)), p50(xs.map((x) => x.create)), p50(xs.map((x) => x.first - x.create)), p50(xs.map((x) => x.again))];
    rows.push([v.label, p50(warm), p90(warm), ...split(r.warm), "-"]);
    if (r.cold.length) rows.push([`${v.runtime}, cold (create with envs)`, p50(cold), p90(cold), ...split(r.cold), warm.length ? fmtRatio(median(cold) / median(warm)) : "-"]);
    rows.push([`${v.runtime}, first create after the build`, fmtMs(r.firstCreate.first), "-", ...split([r.firstCreate]), "-"]);
    const b = r.build;
    builds.push(`${v.label}: ${b.total.toFixed(1)} s (sandbox start ${b.sandbox.toFixed(1)}, RUN ${b.cachedSteps ? "cached" : b.steps[0]!.toFixed(1)}, export ${b.export.toFixed(1)}, start check ${b.startCheck.toFixed(1)})`);
  }
  if (rows.length) {
    printTable(["create -> first byte of GET /", "p50", "p90", "server", "create", "then GET", "GET again", "cold / warm"], rows);
    console.log("p50s of: the server's own create time (its log), Sandbox.create's, the first GET after it, a second GET on the same sandbox");
    console.log(`the template's builds, seconds: ${builds.join("; ")}`);
  }
  const goals: GoalResult[] = [];
  for (const v of variants.filter((x) => x.goalMs !== undefined)) {
    const goal = `<= ${v.goalMs} ms`;
    const metric = `start-command template, create -> first output p50 (${v.label})`;
    const r = results.get(v);
    if (!r) goals.push({ benchmark: "templates", metric, value: "skipped", goal, ok: false, notApplicable: "skipped (reason above)" });
    else if (!r.warm.length) goals.push({ benchmark: "templates", metric, value: "-", goal, ok: false });
    else {
      const ms = median(r.warm.map((x) => x.first));
      goals.push({ benchmark: "templates", metric, value: fmtMs(ms), goal, ok: ms <= v.goalMs! });
    }
  }
  return goals;
}
