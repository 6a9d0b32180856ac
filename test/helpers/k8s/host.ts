// Host plumbing for the test cluster: run a command, start a daemon detached with its log in a file,
// find and kill processes, unmount what is under a directory. No Kubernetes knowledge here.
import { execFile, spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { sleep } from "../wait.js";

export { sleep };

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion; rejects with its stderr when it fails, unless `allowFail`. */
export function run(cmd: string, args: string[], opts: { allowFail?: boolean; timeoutMs?: number; input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(cmd, args, { timeout: opts.timeoutMs ?? 60_000, maxBuffer: 64 << 20, env: opts.env ?? process.env }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === "number" ? ((err as { code: number }).code) : 1) : 0;
      if (code !== 0 && !opts.allowFail) {
        reject(new Error(`${cmd} ${args.join(" ")} failed (${err?.message.split("\n")[0]}): ${String(stderr).trim().slice(-2000)}`));
        return;
      }
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/**
 * Starts a long-running process detached from this one (its own session; it outlives the caller, so `up`
 * from a CLI and `down` from another work), stdout and stderr appended to `logFile`. Returns its pid.
 */
export function startDaemon(cmd: string, args: string[], logFile: string, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const fd = openSync(logFile, "a");
  try {
    const child = spawn(cmd, args, { detached: true, stdio: ["ignore", fd, fd], env });
    return new Promise((resolve, reject) => {
      child.once("error", (e) => reject(new Error(`cannot start ${cmd}: ${e.message}`)));
      child.once("spawn", () => {
        child.unref();
        resolve(child.pid!);
      });
    });
  } finally {
    closeSync(fd);
  }
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !existsSync(`/proc/${pid}/stat`) || !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

export interface ProcInfo {
  pid: number;
  cmdline: string;
  netns?: string;
}

/** Every process on the host, with its command line and network-namespace identity (`net:[inode]`). */
export function processes(): ProcInfo[] {
  const out: ProcInfo[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      let netns: string | undefined;
      try {
        netns = readlinkSync(`/proc/${pid}/ns/net`);
      } catch {
        // exited, or a kernel thread
      }
      out.push({ pid, cmdline, netns });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** The `net:[inode]` identity of a named network namespace's file (/run/netns/NAME), or undefined. */
export function netnsIdentity(path: string): string | undefined {
  try {
    return `net:[${statSync(path).ino}]`;
  } catch {
    return undefined;
  }
}

/** SIGKILLs the pids until none is left (or `timeoutMs`); returns those still alive. */
export async function killAll(pids: number[], timeoutMs = 10_000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let left = pids.filter(alive);
  while (left.length && Date.now() < deadline) {
    for (const pid of left) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    await sleep(50);
    left = left.filter(alive);
  }
  return left;
}

/** Mount points at or under `dir`, deepest first (mountinfo's escapes decoded). */
export function mountsUnder(dir: string): string[] {
  const points = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => l.split(" ")[4]!.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p) => p === dir || p.startsWith(dir + "/"));
  return [...new Set(points)].sort((a, b) => b.length - a.length);
}

/** Lazily unmounts everything under `dir` until nothing is mounted there. */
export async function unmountUnder(dir: string): Promise<string[]> {
  for (let round = 0; round < 10; round++) {
    const points = mountsUnder(dir);
    if (!points.length) return [];
    for (const p of points) await run("umount", ["-l", p], { allowFail: true });
  }
  return mountsUnder(dir);
}


/** The last `n` lines of a file, for error messages. */
export function tail(file: string, n = 20): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-n).join("\n");
  } catch {
    return "";
  }
}

export function commandExists(cmd: string): boolean {
  const dirs = (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/sbin", "/usr/local/go/bin"]);
  return dirs.some((d) => d && existsSync(`${d}/${cmd}`));
}
