import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** Clock ticks per second in /proc/<pid>/stat (USER_HZ: 100 on every Linux architecture Node runs on). */
const CLK_TCK = 100;

export interface ProcStat {
  /** R, S, D, T, Z, ... */
  state: string;
  ppid: number;
  pgrp: number;
  /** utime + stime, in nanoseconds */
  cpuNs: number;
  /** Start time after boot, in clock ticks: with the pid, it names one process for good. */
  startTime: number;
  rssBytes: number;
}

const PAGE = 4096;

/** /proc/<pid>/stat (with `tid`, one thread's: /proc/<pid>/task/<tid>/stat), parsed; undefined when it is gone. */
export function procStat(pid: number, tid?: number): ProcStat | undefined {
  let text: string;
  try {
    text = readFileSync(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`, "latin1");
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may contain anything: split after the last ')'.
  const f = text.slice(text.lastIndexOf(")") + 2).split(" ");
  // f[0] is field 3 (state); field n is f[n - 3].
  return {
    state: f[0] ?? "?",
    ppid: Number(f[1]),
    pgrp: Number(f[2]),
    cpuNs: ((Number(f[11]) + Number(f[12])) * 1e9) / CLK_TCK,
    startTime: Number(f[19]),
    rssBytes: Number(f[21]) * PAGE,
  };
}

/** The thread ids of a process (empty when it is gone). */
export function procTasks(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number);
  } catch {
    return [];
  }
}

/**
 * Whether `pid` is a live process (a zombie is not) and, when `startTime`
 * is given, the same process as before (not a recycled pid).
 */
export function isRunning(pid: number, startTime?: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  const st = procStat(pid);
  if (!st || st.state === "Z" || st.state === "X") return false;
  return startTime === undefined || st.startTime === startTime;
}

export function cmdline(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
  } catch {
    return [];
  }
}

/** `pid:[4026531836]`-style identity of a process's pid namespace (or the one its children get). */
export function pidNamespace(pid: number, forChildren = false): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/${forChildren ? "pid_for_children" : "pid"}`);
  } catch {
    return undefined;
  }
}

/** Every pid (host numbering) whose pid namespace is `ns`. */
export function pidsInNamespace(ns: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid <= 0) continue;
    if (pidNamespace(pid) === ns) out.push(pid);
  }
  return out;
}

/** Sends `sig` to each pid, ignoring ones that are already gone. */
export function signalPids(pids: number[], sig: NodeJS.Signals): void {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
    }
  }
}

/** Sends `sig` to a process group, ignoring a group that is already gone. */
export function signalGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
  }
}

/** Polls `pred` every `stepMs` until it holds (true) or `timeoutMs` passes (false). */
export async function waitFor(pred: () => boolean, timeoutMs: number, stepMs = 2): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (pred()) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}
