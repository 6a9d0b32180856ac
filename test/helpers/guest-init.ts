// Runs the guest init (rootfs/init, built by ensureInitBinary) as an
// ordinary process in process mode, with this repo's envd behind it, and
// reads /proc around it. Used by test/rootfs/init.test.ts.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { cliEntry } from "../../control-plane/runtimes/paths.js";

export const hasGcc = spawnSync(process.env.CC || "gcc", ["--version"], { stdio: "ignore" }).status === 0;

export interface RunningInit {
  child: ChildProcess;
  pid: number;
  /** Everything the init (and envd) wrote to stderr and stdout so far. */
  log(): string;
  waitForLog(re: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Resolves with (code, signal) once the init exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts `file args…` (the init, or a wrapper that runs it), collecting its output. */
export function startInit(file: string, args: string[]): RunningInit {
  const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    pid: child.pid!,
    log: () => out,
    exited,
    async waitForLog(re, timeoutMs = 20_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const m = out.match(re);
        if (m) return m;
        if (Date.now() > until) throw new Error(`no ${re} in the init's output within ${timeoutMs} ms:\n${out}`);
        await sleep(20);
      }
    },
  };
}

/** Process mode with this repo's envd (`node dist/control-plane/cli/main.js envd`) behind the bridge. */
export function startInitWithEnvd(binary: string, dir: string, extra: string[] = []): RunningInit {
  const envdSocket = join(dir, "envd.sock");
  const envd = [cliEntry(), "envd", "--listen", `unix://${envdSocket}`];
  return startInit(binary, [
    "--no-mounts",
    "--hybrid-listen",
    join(dir, "host.sock"),
    "--envd-socket",
    envdSocket,
    "--envd-cmd",
    process.execPath,
    ...envd.flatMap((a) => ["--envd-arg", a]),
    ...extra,
  ]);
}

export interface ProcInfo {
  pid: number;
  comm: string;
  state: string;
  ppid: number;
}

export function procInfo(pid: number): ProcInfo | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const close = stat.lastIndexOf(")");
    const [state, ppid] = stat.slice(close + 2).split(" ");
    return { pid, comm: stat.slice(stat.indexOf("(") + 1, close), state: state!, ppid: Number(ppid) };
  } catch {
    return undefined; // gone
  }
}

/** Every process whose parent is `pid` (zombies included). */
export function childrenOf(pid: number): ProcInfo[] {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .map((d) => procInfo(Number(d)))
    .filter((p): p is ProcInfo => p?.ppid === pid);
}

/** VmRSS / VmHWM of a process in KiB. */
export function memoryKiB(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
  return { rss: kib("VmRSS"), hwm: kib("VmHWM") };
}

/** User + system CPU time of a process, in clock ticks. */
export function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of stat)
}

export function fdCount(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

export async function waitFor(pred: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(25);
  }
}

export function which(cmd: string): string | undefined {
  for (const dir of (process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin").split(":")) {
    const p = join(dir, cmd);
    if (existsSync(p)) return p;
  }
  return undefined;
}
