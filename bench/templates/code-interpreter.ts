import { Sandbox } from "@e2b/code-interpreter";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import http from "node:http";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { onCleanup } from "../lib/cleanup.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable } from "../lib/report.js";
import { median, quantile } from "../lib/stats.js";
import { imageNote, missing, startTemplateServer, waitWarm, type TemplateServer } from "./server.js";

// 3. runCode('1+1') with @e2b/code-interpreter through a real
// code-interpreter-v1 sandbox, against the same code sent straight to a local
// Jupyter kernel with jupyter_client.
// 4. code-interpreter-v1: create -> first runCode result, warm pool and cold.

const TEMPLATE = "code-interpreter-v1";
const CODE = "1+1";
const JUPYTER_PORT = 49999;
const GOAL_RATIO = 1.3;
const GOAL_CREATE_MS = 300;
/** The repository (this file is dist/bench/templates/code-interpreter.js). */
const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

const p50 = (xs: number[]) => (xs.length ? fmtMs(median(xs)) : "-");
const p90 = (xs: number[]) => (xs.length ? fmtMs(quantile(xs, 0.9)) : "-");

function ciSandbox(s: TemplateServer, envs?: Record<string, string>): Promise<Sandbox> {
  return Sandbox.create({ ...s.conn, timeoutMs: 600_000, ...(envs ? { envs } : {}) });
}

async function runCodeMs(sbx: Sandbox): Promise<number> {
  const t0 = performance.now();
  const ex = await sbx.runCode(CODE);
  const ms = performance.now() - t0;
  if (ex.text !== "2") throw new Error(`runCode('${CODE}') gave ${JSON.stringify(ex.text)} (error: ${ex.error?.name ?? "none"})`);
  return ms;
}

const rawAgent = new http.Agent({ keepAlive: true, maxSockets: 4 });

/** The same POST /execute through the proxy with node:http (keep-alive), read to its end: the SDK's part apart. */
function rawExecuteMs(s: TemplateServer, sbx: Sandbox): Promise<number> {
  const body = JSON.stringify({ code: CODE });
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(`${s.cp.url}/execute`, {
      method: "POST",
      agent: rawAgent,
      headers: { "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": String(JUPYTER_PORT), "content-type": "application/json", "content-length": Buffer.byteLength(body) },
    });
    req.once("error", reject);
    req.once("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.once("error", reject);
      res.once("end", () => {
        const ms = performance.now() - t0;
        const result = text.split("\n").filter(Boolean).map((l) => JSON.parse(l) as { type: string; text?: string }).find((l) => l.type === "result");
        if (res.statusCode !== 200 || result?.text !== "2") reject(new Error(`POST /execute answered ${res.statusCode}: ${text.slice(0, 200)}`));
        else resolve(ms);
      });
    });
    req.end(body);
  });
}

/** A local kernel driven by bench/templates/jupyter_direct.py in the host venv; undefined (and why) where there is none. */
class DirectKernel {
  private readonly lines: AsyncIterator<string>;
  private constructor(private readonly child: ChildProcess) {
    this.lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  }

  static async start(): Promise<DirectKernel | string> {
    const setup = spawnSync("bash", [join(REPO, "scripts", "setup-code-interpreter-venv.sh")], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    if (setup.status !== 0) return `no host venv (scripts/setup-code-interpreter-venv.sh: ${setup.stderr.trim().split("\n").pop() ?? `exit ${setup.status}`})`;
    const venv = setup.stdout.trim().split("\n").pop()!;
    const child = spawn(join(venv, "bin", "python"), [join(REPO, "bench", "templates", "jupyter_direct.py")], { stdio: ["pipe", "pipe", "inherit"] });
    const forget = onCleanup(() => child.kill("SIGKILL"));
    child.once("exit", () => forget());
    const k = new DirectKernel(child);
    const first = await k.next();
    if (!first?.ready) {
      child.kill("SIGKILL");
      return "the local kernel did not start (see above)";
    }
    return k;
  }

  private async next(): Promise<{ ready?: boolean; ms?: number; text?: string } | undefined> {
    const r = await this.lines.next();
    return r.done ? undefined : (JSON.parse(r.value) as { ready?: boolean; ms?: number; text?: string });
  }

  /** The round trip as jupyter_client measured it in the Python process. */
  async run(code: string): Promise<number> {
    this.child.stdin!.write(`${JSON.stringify(code)}\n`);
    const r = await this.next();
    if (r?.text !== "2" || r.ms === undefined) throw new Error(`the local kernel answered ${JSON.stringify(r)}`);
    return r.ms;
  }

  async stop(): Promise<void> {
    const exited = new Promise((r) => this.child.once("exit", r));
    this.child.stdin!.end();
    const killer = setTimeout(() => this.child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(killer);
  }
}

export async function benchRunCode(): Promise<GoalResult[]> {
  const n = envInt("LOCALE2B_BENCH_RUNCODE_N", 100);
  const warmup = 10;
  heading(`templates 3: runCode('${CODE}') round trip, @e2b/code-interpreter through a ${TEMPLATE} sandbox (process runtime) vs jupyter_client to a local kernel; ${n} each, interleaved, after ${warmup} warm-up`);
  const metric = `runCode('${CODE}') SDK via sandbox / local kernel (p50)`;
  const why = missing("process", [TEMPLATE]);
  if (why) {
    console.log(`skipped: ${why}`);
    return [{ benchmark: "templates", metric, value: "skipped", goal: `<= ${GOAL_RATIO}x`, ok: false, notApplicable: "skipped (reason above)" }];
  }
  console.log(`image: ${imageNote(TEMPLATE)}`);
  const direct = await DirectKernel.start();
  if (typeof direct === "string") console.log(`local kernel: skipped: ${direct}`);
  // No warm pool: nothing starts in the background while the round trips are measured.
  const s = await startTemplateServer("process", 0);
  const sdk: number[] = [];
  const raw: number[] = [];
  const local: number[] = [];
  try {
    const sbx = await ciSandbox(s);
    try {
      for (let i = 0; i < warmup + n; i++) {
        // Rotate the order, so none of them always runs right after another.
        const runs: (() => Promise<number>)[] = [() => runCodeMs(sbx), () => rawExecuteMs(s, sbx), ...(typeof direct === "string" ? [] : [() => direct.run(CODE)])];
        const out: number[] = [];
        for (let j = 0; j < runs.length; j++) {
          const k = (i + j) % runs.length;
          out[k] = await runs[k]!();
        }
        if (i < warmup) continue;
        sdk.push(out[0]!);
        raw.push(out[1]!);
        if (out[2] !== undefined) local.push(out[2]);
      }
    } finally {
      await sbx.kill();
    }
  } finally {
    if (typeof direct !== "string") await direct.stop();
    await s.stop();
  }
  const base = local.length ? median(local) : NaN;
  printTable(
    ["runCode('1+1') round trip", "p50", "p90", "/ local kernel"],
    [
      ["@e2b/code-interpreter runCode, through the proxy", p50(sdk), p90(sdk), fmtRatio(median(sdk) / base)],
      ["POST /execute with node:http, through the proxy", p50(raw), p90(raw), fmtRatio(median(raw) / base)],
      ["jupyter_client to a local python3 kernel (baseline)", p50(local), p90(local), local.length ? "1.00x" : "-"],
    ],
  );
  console.log("The sandbox's kernel also loads matplotlib's inline backend and the chart formatter (kernel_startup/); the local one is a plain ipykernel.");
  if (!local.length) return [{ benchmark: "templates", metric, value: `${p50(sdk)} (no baseline)`, goal: `<= ${GOAL_RATIO}x`, ok: false, notApplicable: "no local kernel (reason above)" }];
  const ratio = median(sdk) / base;
  return [{ benchmark: "templates", metric, value: fmtRatio(ratio), goal: `<= ${GOAL_RATIO}x`, ok: ratio <= GOAL_RATIO }];
}

interface CreateSample {
  create: number;
  first: number;
  /** The server's own time for the create (its "sandbox created" log event). */
  server: number;
}

async function createAndRun(s: TemplateServer, envs?: Record<string, string>): Promise<CreateSample> {
  const t0 = performance.now();
  const sbx = await ciSandbox(s, envs);
  const create = performance.now() - t0;
  try {
    await runCodeMs(sbx);
    return { create, first: performance.now() - t0, server: s.cp.createdMs.get(sbx.sandboxId) ?? NaN };
  } finally {
    await sbx.kill();
  }
}

export async function benchCodeInterpreterCreate(): Promise<GoalResult[]> {
  const warmN = envInt("LOCALE2B_BENCH_TEMPLATE_CREATES", 10);
  const coldN = envInt("LOCALE2B_BENCH_TEMPLATE_COLD", 3);
  heading(`templates 4: ${TEMPLATE} create -> first runCode('${CODE}') result (@e2b/code-interpreter, process runtime); ${warmN} from the warm pool, ${coldN} cold`);
  const metric = `${TEMPLATE} create -> first runCode p50 (warm pool)`;
  const why = missing("process", [TEMPLATE]);
  if (why) {
    console.log(`skipped: ${why}`);
    return [{ benchmark: "templates", metric, value: "skipped", goal: `<= ${GOAL_CREATE_MS} ms`, ok: false, notApplicable: "skipped (reason above)" }];
  }
  console.log(`image: ${imageNote(TEMPLATE)}`);
  const s = await startTemplateServer("process", 1);
  const warm: CreateSample[] = [];
  const cold: CreateSample[] = [];
  let first: CreateSample;
  try {
    first = await createAndRun(s); // cold; the template gets its warm pool
    if (!(await waitWarm(s, 1))) throw new Error("the warm pool did not fill within 120 s");
    for (let i = 0; i < Math.max(warmN, coldN); i++) {
      if (i < warmN) {
        warm.push(await createAndRun(s));
        if (!(await waitWarm(s, 1))) throw new Error("the warm pool did not refill within 120 s");
      }
      if (i < coldN) {
        // Env vars of its own: the create starts a fresh sandbox, whose start command (the server, its kernels) must see them.
        cold.push(await createAndRun(s, { LOCALE2B_BENCH_COLD: String(i) }));
        if (!(await waitWarm(s, 1))) throw new Error("the warm pool did not refill within 120 s");
      }
    }
  } finally {
    await s.stop();
  }
  const w = warm.map((x) => x.first);
  const c = cold.map((x) => x.first);
  const split = (xs: CreateSample[]) => [p50(xs.map((x) => x.server)), p50(xs.map((x) => x.create)), p50(xs.map((x) => x.first - x.create))];
  printTable(
    ["create -> first runCode result", "p50", "p90", "server", "create", "then runCode"],
    [
      ["warm pool", p50(w), p90(w), ...split(warm)],
      ["cold (create with envs)", p50(c), p90(c), ...split(cold)],
      ["first create of the server", fmtMs(first.first), "-", ...split([first])],
    ],
  );
  console.log("p50s of: the server's own create time (its log), Sandbox.create's, the first runCode after it");
  if (w.length && c.length) console.log(`cold / warm: ${fmtRatio(median(c) / median(w))}`);
  const v = median(w);
  return [{ benchmark: "templates", metric, value: fmtMs(v), goal: `<= ${GOAL_CREATE_MS} ms`, ok: v <= GOAL_CREATE_MS }];
}
