import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { GUEST } from "../../control-plane/images/layout.js";
import { onCleanup } from "./cleanup.js";

/** dist/control-plane/cli/main.js, found from this compiled file (dist/bench/lib/envd.js). */
const CLI = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "control-plane", "cli", "main.js");

export interface EnvdChild {
  url: string;
  pid: number;
  child: ChildProcess;
  /** Milliseconds from spawn to the first 2xx answer to GET /health. */
  startupMs: number;
  /** The last few KiB envd wrote to stderr (its logs), for error messages. */
  stderrTail(): string;
  stop(): Promise<void>;
}

/** A TCP port that was free a moment ago (bind to 0, read it, close). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts `locale2b envd` as a child process on a free port and waits until
 * GET /health answers 204; with `entry`, that envd bundle instead, as a
 * sandbox runs it (`node <GUEST.nodeFlags> envd.js --listen …`). Extra node flags for envd (e.g.
 * `--cpu-prof`) come from LOCALE2B_BENCH_ENVD_NODE_ARGS.
 */
export async function startEnvdChild(timeoutMs = 15_000, pollMs = 50, entry?: string): Promise<EnvdChild> {
  if (!entry && !existsSync(CLI)) throw new Error(`${CLI} is missing: run 'npm run build' first`);
  const port = await freePort();
  const nodeArgs = (process.env.LOCALE2B_BENCH_ENVD_NODE_ARGS ?? "").split(/\s+/).filter(Boolean);
  return startHttpChild({
    name: "envd",
    command: process.execPath,
    args: [...nodeArgs, ...(entry ? [...GUEST.nodeFlags, entry] : [CLI, "envd"]), "--listen", `tcp://127.0.0.1:${port}`],
    port,
    env: { ...process.env, LOCALE2B_LOG_LEVEL: process.env.LOCALE2B_LOG_LEVEL ?? "warn" },
    timeoutMs,
    pollMs,
  });
}

export interface HttpChildOptions {
  /** For error messages, e.g. "envd". */
  name: string;
  command: string;
  args: string[];
  /** The port it listens on, on 127.0.0.1. */
  port: number;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  /** How often GET /health is tried while it starts. */
  pollMs?: number;
}

/**
 * Spawns a server that answers GET /health with 2xx (any envd) and waits
 * for that answer. `startupMs` is the time from spawn to the first 2xx.
 */
export async function startHttpChild(o: HttpChildOptions): Promise<EnvdChild> {
  const timeoutMs = o.timeoutMs ?? 15_000;
  const t0 = performance.now();
  const child = spawn(o.command, o.args, { stdio: ["ignore", "ignore", "pipe"], env: o.env ?? process.env });
  // Never leave an envd behind, whatever way the benchmark ends.
  const forget = onCleanup(() => child.kill("SIGKILL"));
  let tail = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (s: string) => {
    tail = (tail + s).slice(-4096);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.once("exit", forget);
  child.once("error", (err) => {
    tail += `\nspawn ${o.command}: ${err.message}`;
  });
  const url = `http://127.0.0.1:${o.port}`;

  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${o.name} exited (${child.exitCode ?? child.signalCode}) before answering /health:\n${tail}`);
    }
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
      if (res.status >= 200 && res.status < 300) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`${o.name} did not answer GET /health with 2xx within ${timeoutMs} ms:\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, o.pollMs ?? 50));
  }
  const startupMs = performance.now() - t0;

  return {
    url,
    pid: child.pid!,
    child,
    startupMs,
    stderrTail: () => tail,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM"); // lets envd exit cleanly, so a --cpu-prof profile gets written
      const killer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(killer);
    },
  };
}
