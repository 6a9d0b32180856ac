import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { onCleanup } from "./cleanup.js";
import { ownImagesDir as ownImages } from "../../test/helpers/fleet-images.js";
import { CLI, killSandboxesSync, request } from "./control-plane.js";

/**
 * Helpers of `npm run bench -- fleet` (bench/fleet.ts): `locale2b api` and
 * `locale2b node` as child processes on this machine, an image cache of a
 * second node's own, and a sync clean-up for the test Postgres.
 */

/** The header that carries the fleet's node token (control-plane/fleet/node-agent.ts). */
export { NODE_TOKEN_HEADER } from "../../control-plane/fleet/node-agent.js";
export { waitForWarmPools } from "./control-plane.js";

/** The server's `--max-sandboxes` / `--memory-budget-mb` as startControlPlaneChild gives serve: the benchmark's counts decide, not the caps. */
export const NO_CAPS = ["--max-sandboxes", "100000", "--memory-budget-mb", String(1024 * 1024 * 1024)];

export interface FleetChild {
  /** `api` or `node <name>`. */
  name: string;
  /** Where it is reached (the API's E2B_API_URL, a node's advertised URL). */
  url: string;
  pid: number;
  child: ChildProcess;
  /** A node's data dir (removed by stop()), else undefined. */
  dataDir?: string;
  stderrTail(): string;
  /** SIGTERM (SIGKILL after 5 s); for a node, then kills what is left of its sandboxes and removes its data dir. */
  stop(): Promise<void>;
}

/** The environment without anything that points the CLI elsewhere (as test/helpers/cli.ts cleanEnv). */
function childEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ["E2B_API_KEY", "LOCALE2B_API_KEY", "LOCALE2B_URL", "LOCALE2B_DATA_DIR", "PORT", "E2B_API_URL", "E2B_SANDBOX_URL"]) delete env[k];
  return { ...env, LOCALE2B_LOG_LEVEL: process.env.LOCALE2B_LOG_LEVEL ?? "info", ...extra };
}

/**
 * `node dist/control-plane/cli/main.js <args>` (with LOCALE2B_BENCH_CP_NODE_ARGS,
 * as serve gets them), resolved once its stdout matches `ready` (group 1: its URL).
 * Killed, with its data dir's sandboxes, however the benchmark ends.
 */
export function startFleetChild(
  name: string,
  args: string[],
  env: Record<string, string>,
  ready: RegExp,
  dataDir?: string,
  timeoutMs = 60_000,
  /** Pinned to these CPUs (`taskset -c`), it and every process it starts (its sandboxes): a host of that many cores. */
  cpus?: string,
): Promise<FleetChild> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run 'npm run build' first`);
  const nodeArgs = (process.env.LOCALE2B_BENCH_CP_NODE_ARGS ?? "").split(/\s+/).filter(Boolean);
  const argv = [process.execPath, ...nodeArgs, CLI, ...args];
  // taskset execs node in place: the child's pid is node's.
  const [cmd, ...rest] = cpus === undefined ? argv : ["taskset", "-c", cpus, ...argv];
  const child = spawn(cmd!, rest, { env: childEnv(env), stdio: ["ignore", "pipe", "pipe"] });
  const forget = onCleanup(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // gone
    }
    if (dataDir) {
      killSandboxesSync(dataDir);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
  let out = "";
  let tail = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (tail = (tail + s).slice(-8192)));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    try {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const killer = setTimeout(() => child.kill("SIGKILL"), 5000);
        await exited;
        clearTimeout(killer);
      }
      if (dataDir) {
        const left = killSandboxesSync(dataDir);
        if (left) console.log(`  note: ${left} sandbox process(es) of ${name} were still running after it stopped (its warm pool, or kept by design); killed`);
        rmSync(dataDir, { recursive: true, force: true });
      }
    } finally {
      forget();
    }
  };
  let started = false;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop().then(() => reject(new Error(`${name} did not start within ${timeoutMs} ms:\n${out}\n${tail}`)));
    }, timeoutMs);
    child.stdout!.setEncoding("utf8").on("data", (s: string) => {
      if (started) return;
      out += s;
      const m = ready.exec(out);
      if (!m) return;
      clearTimeout(timer);
      started = true;
      resolve({ name, url: m[1]!, pid: child.pid!, child, ...(dataDir ? { dataDir } : {}), stderrTail: () => tail, stop });
    });
    void exited.then(() => {
      if (started) return; // stop() cleans up
      clearTimeout(timer);
      forget();
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
      reject(new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before it started:\n${out}\n${tail}`));
    });
  });
}


/** A second node's own image cache (test/helpers/fleet-images.ts), removed at the bench's cleanup. */
export function ownImagesDir(shared: string): string {
  const dir = ownImages(shared, "locale2b-bench-fleet-images-");
  onCleanup(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A synchronous last resort for the test Postgres (test/helpers/postgres.ts,
 * whose stop() is async): on Ctrl-C or an uncaught error, an immediate
 * shutdown (SIGQUIT to the postmaster) and its directory removed. `url` is
 * one of its database URLs (postgresql://user@<socket dir>/db).
 */
export function onPostgresCleanup(url: string): () => void {
  const dir = decodeURIComponent(/^postgresql:\/\/[^@]*@([^/]+)\//.exec(url)?.[1] ?? "");
  if (!dir.startsWith("/")) throw new Error(`cannot tell the Postgres directory from ${url}`);
  return onCleanup(() => {
    let pid = 0;
    try {
      pid = Number(readFileSync(join(dir, "data", "postmaster.pid"), "utf8").split("\n")[0]);
    } catch {
      // not running
    }
    if (pid > 0) {
      try {
        process.kill(pid, "SIGQUIT");
        const until = Date.now() + 5000;
        for (;;) {
          process.kill(pid, 0);
          if (Date.now() > until) {
            process.kill(pid, "SIGKILL");
            break;
          }
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
        }
      } catch {
        // gone
      }
    }
    rmSync(dir, { recursive: true, force: true });
  });
}
