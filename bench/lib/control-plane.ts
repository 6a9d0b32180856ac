import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, rmdirSync, rmSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { onCleanup } from "./cleanup.js";
import { freePort } from "./envd.js";
import { pidsByCmdline, processTable, sandboxCgroupDirs, sandboxPids } from "./procmem.js";

/** dist/control-plane/cli/main.js, found from this compiled file (dist/bench/lib/control-plane.js). */
export const CLI = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "control-plane", "cli", "main.js");

/** envd's port inside a sandbox (E2b-Sandbox-Port). */
export const ENVD_PORT = 49983;

export interface SandboxHandle {
  id: string;
  /** envd's access token (X-Access-Token). */
  token: string;
  /** `<dataDir>/sandboxes/<id>`. */
  dir: string;
  /** The hybrid-vsock socket envd serves on. */
  socketPath: string;
  /** The proxy's headers for this sandbox. */
  proxyHeaders: Record<string, string>;
}

export interface ControlPlaneChild {
  url: string;
  /** The key it accepts (X-API-Key). */
  apiKey: string;
  pid: number;
  dataDir: string;
  child: ChildProcess;
  /** sandbox id → the `ms` of the control plane's "sandbox created" log event. */
  readonly createdMs: Map<string, number>;
  /** Sandboxes created and not yet deleted through this handle. */
  readonly live: Set<string>;
  stderrTail(): string;
  createSandbox(timeoutSeconds?: number): Promise<SandboxHandle>;
  deleteSandbox(id: string): Promise<void>;
  getSandbox(id: string): Promise<Record<string, unknown>>;
  /** The `locale2b_warm_pool_ready` gauge of /metrics (0 when absent). */
  warmReady(): Promise<number>;
  /** Deletes every live sandbox (`concurrency` at a time); returns how many could not be deleted. */
  deleteAll(concurrency?: number): Promise<number>;
  /** Deletes every sandbox, stops the server, kills anything left, removes the data dir. */
  stop(): Promise<void>;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
const requestTo = (...args: Parameters<typeof request>) => request(...args);

/** A small JSON request over the benchmarks' keep-alive agent (`tlsAgent` for https:// URLs); the body is read whole (small answers only). */
export function request(
  url: string,
  method: string,
  headers: Record<string, string>,
  body?: unknown,
  tlsAgent?: https.Agent,
): Promise<{ status: number; body: string }> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const secure = url.startsWith("https:");
  return new Promise((resolve, reject) => {
    const req = (secure ? https : http).request(url, {
      method,
      agent: secure ? tlsAgent : agent,
      headers: { ...headers, ...(payload ? { "content-type": "application/json", "content-length": String(payload.length) } : {}) },
    });
    req.once("error", reject);
    req.once("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.once("error", reject);
      res.once("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
    });
    req.end(payload);
  });
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Kills, synchronously, every process of every sandbox under `dataDir` (by
 * cgroup and by command line), removes their cgroups and the data dir. For
 * Ctrl-C and errors: sandboxes outlive their control plane by design, so
 * killing the server is not enough.
 */
export function killSandboxesSync(dataDir: string, extraIds: Iterable<string> = []): number {
  const sandboxesDir = join(dataDir, "sandboxes");
  const ids = new Set<string>(extraIds);
  try {
    for (const name of readdirSync(sandboxesDir)) ids.add(name);
  } catch {
    // no sandboxes dir
  }
  const table = processTable();
  const pids = pidsByCmdline(`${sandboxesDir}/`, table);
  for (const id of ids) for (const p of sandboxPids(id, join(sandboxesDir, id), table).pids) pids.add(p);
  pids.delete(process.pid);
  for (const p of pids) {
    try {
      process.kill(p, "SIGKILL");
    } catch {
      // gone
    }
  }
  const deadline = Date.now() + 3000;
  while ([...pids].some(alive) && Date.now() < deadline) sleepSync(20);
  for (const id of ids) {
    for (const d of sandboxCgroupDirs(id)) {
      for (let i = 0; i < 50; i++) {
        try {
          rmdirSync(d);
          break;
        } catch {
          sleepSync(20);
        }
      }
    }
  }
  return pids.size;
}

/**
 * Starts `locale2b serve` on a free port with a fresh data dir under
 * os.tmpdir() and a random API key, waits until GET /health answers, and
 * follows its log (stderr) for "sandbox created" timings. Extra node flags
 * for the server (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`) come from
 * LOCALE2B_BENCH_CP_NODE_ARGS; `env` adds to (or overrides) this process's
 * environment for it. Whatever way the benchmark ends, the server,
 * every sandbox it started and the data dir are removed.
 */
export async function startControlPlaneChild(
  opts: {
    extraArgs?: string[];
    timeoutMs?: number;
    env?: Record<string, string>;
    /** Serve TLS with these files; `ca` is what this process trusts for them. */
    tls?: { cert: string; key: string; ca: Buffer };
  } = {},
): Promise<ControlPlaneChild> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run 'npm run build' first`);
  const port = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), "locale2b-bench-cp-"));
  const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
  const nodeArgs = (process.env.LOCALE2B_BENCH_CP_NODE_ARGS ?? "").split(/\s+/).filter(Boolean);
  const live = new Set<string>();
  const child = spawn(
    process.execPath,
    [
      ...nodeArgs,
      CLI,
      "serve",
      "--port",
      String(port),
      "--host",
      "127.0.0.1",
      "--data-dir",
      dataDir,
      // The benchmark's own counts, not the server's default caps, decide how many sandboxes exist.
      "--max-sandboxes",
      "100000",
      "--memory-budget-mb",
      String(1024 * 1024 * 1024),
      ...(opts.tls ? ["--tls-cert", opts.tls.cert, "--tls-key", opts.tls.key] : []),
      ...(opts.extraArgs ?? []),
    ],
    {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, ...opts.env, LOCALE2B_API_KEY: apiKey, LOCALE2B_LOG_LEVEL: process.env.LOCALE2B_LOG_LEVEL ?? "info" },
    },
  );
  const forget = onCleanup(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // gone
    }
    killSandboxesSync(dataDir, live);
    rmSync(dataDir, { recursive: true, force: true });
  });
  const createdMs = new Map<string, number>();
  let tail = "";
  let partial = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (s: string) => {
    tail = (tail + s).slice(-8192);
    const lines = (partial + s).split("\n");
    partial = lines.pop() ?? "";
    for (const line of lines) {
      if (!line.includes('"sandbox created"')) continue;
      try {
        const e = JSON.parse(line) as { sandboxId?: string; ms?: number };
        if (e.sandboxId && typeof e.ms === "number") createdMs.set(e.sandboxId, e.ms);
      } catch {
        // not JSON
      }
    }
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `${opts.tls ? "https" : "http"}://127.0.0.1:${port}`;
  const auth = { "X-API-Key": apiKey };
  const tlsAgent = opts.tls ? new https.Agent({ keepAlive: true, maxSockets: 64, ca: opts.tls.ca }) : undefined;
  const request = (u: string, method: string, headers: Record<string, string>, body?: unknown) => requestTo(u, method, headers, body, tlsAgent);

  const deadline = Date.now() + (opts.timeoutMs ?? 20_000);
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      forget();
      rmSync(dataDir, { recursive: true, force: true });
      throw new Error(`locale2b serve exited (${child.exitCode ?? child.signalCode}) before answering /health:\n${tail}`);
    }
    try {
      const res = await request(`${url}/health`, "GET", {});
      if (res.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      forget();
      rmSync(dataDir, { recursive: true, force: true });
      throw new Error(`locale2b serve did not answer GET /health within ${opts.timeoutMs ?? 20_000} ms:\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }

  const cp: ControlPlaneChild = {
    url,
    apiKey,
    pid: child.pid!,
    dataDir,
    child,
    createdMs,
    live,
    stderrTail: () => tail,
    async createSandbox(timeoutSeconds = 3600) {
      const res = await request(`${url}/v2/sandboxes`, "POST", auth, { templateID: "base", timeout: timeoutSeconds });
      if (res.status !== 201) throw new Error(`POST /v2/sandboxes answered ${res.status}: ${res.body.slice(0, 300)}`);
      const body = JSON.parse(res.body) as { sandboxID: string; envdAccessToken: string };
      live.add(body.sandboxID);
      const dir = join(dataDir, "sandboxes", body.sandboxID);
      return {
        id: body.sandboxID,
        token: body.envdAccessToken,
        dir,
        socketPath: join(dir, "envd.sock"),
        proxyHeaders: { "E2b-Sandbox-Id": body.sandboxID, "E2b-Sandbox-Port": String(ENVD_PORT), "X-Access-Token": body.envdAccessToken },
      };
    },
    async deleteSandbox(id) {
      const res = await request(`${url}/sandboxes/${id}`, "DELETE", auth);
      if (res.status !== 204 && res.status !== 404) throw new Error(`DELETE /sandboxes/${id} answered ${res.status}: ${res.body.slice(0, 300)}`);
      live.delete(id);
    },
    async getSandbox(id) {
      const res = await request(`${url}/sandboxes/${id}`, "GET", auth);
      if (res.status !== 200) throw new Error(`GET /sandboxes/${id} answered ${res.status}: ${res.body.slice(0, 300)}`);
      return JSON.parse(res.body) as Record<string, unknown>;
    },
    async warmReady() {
      const res = await request(`${url}/metrics`, "GET", auth);
      const m = /^locale2b_warm_pool_ready(?:\{\})? (\d+)/m.exec(res.body);
      return m ? Number(m[1]) : 0;
    },
    async deleteAll(concurrency = 16) {
      const ids = [...live];
      let failed = 0;
      let next = 0;
      const worker = async () => {
        while (next < ids.length) {
          const id = ids[next++]!;
          await cp.deleteSandbox(id).catch(() => failed++);
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, ids.length) }, worker));
      return failed;
    },
    async stop() {
      try {
        if (child.exitCode === null && child.signalCode === null) {
          const failed = await cp.deleteAll();
          if (failed) console.log(`  warning: ${failed} sandbox(es) could not be deleted through the API; killing them`);
          child.kill("SIGTERM"); // a clean exit writes a --cpu-prof profile
          const killer = setTimeout(() => child.kill("SIGKILL"), 5000);
          await exited;
          clearTimeout(killer);
        }
        const leftovers = killSandboxesSync(dataDir, live);
        if (leftovers) console.log(`  warning: ${leftovers} sandbox process(es) were still running after the server stopped; killed`);
        rmSync(dataDir, { recursive: true, force: true });
      } finally {
        tlsAgent?.destroy();
        forget();
      }
    },
  };
  return cp;
}

/** The `locale2b_warm_pool_ready` gauge of a server's /metrics (0 when absent); `headers`: its API key, and a node's token. */
export async function warmPoolReady(url: string, headers: Record<string, string>): Promise<number> {
  const res = await request(`${url}/metrics`, "GET", headers);
  const m = /^locale2b_warm_pool_ready(?:\{\})? (\d+)/m.exec(res.body);
  return m ? Number(m[1]) : 0;
}

/** Polls warmPoolReady until every one of `pools` holds `ready` sandboxes; false if that takes longer than `timeoutMs`. */
export async function waitForWarmPools(pools: { url: string; headers: Record<string, string> }[], ready: number, timeoutMs: number): Promise<boolean> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const counts = await Promise.all(pools.map((p) => warmPoolReady(p.url, p.headers)));
    if (counts.every((c) => c >= ready)) return true;
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}
