import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { waitFor } from "./procfs.js";
import { setting } from "../../settings.js";

/**
 * One sandbox's control group, whatever the host mounts: cgroup v1
 * (one directory per controller hierarchy, as on this project's machines)
 * or cgroup v2 (one directory in the unified tree, as on most hosts).
 * Implementations: cgroup-v1.ts and cgroup-v2.ts; cgroup-detect.ts picks one.
 */
export interface SandboxCgroup {
  readonly kind: "v1" | "v2";
  /** JSON-safe, for re-adoption after a control-plane restart (see openCgroup). */
  readonly record: CgroupRecord;
  /** The cgroup.procs files a new process must write its pid to (before it forks). */
  readonly procsFiles: string[];
  /** Whether freeze()/thaw() work (a freezer is available); else pause falls back to SIGSTOP. */
  readonly canFreeze: boolean;
  exists(): boolean;
  /** Every process in the group (host pids). */
  pids(): number[];
  freeze(): Promise<void>;
  thaw(): Promise<void>;
  frozen(): boolean;
  /** Bytes in use (without reclaimable page cache), if the memory controller is there. */
  memoryUsage(): number | undefined;
  memoryLimit(): number | undefined;
  /** Background: the smallest CPU share, so the group runs only on CPU nobody else wants; else the normal share. */
  setBackground(background: boolean): void;
  /** CPU time used by the group so far, in nanoseconds, if accounted. */
  cpuNs(): number | undefined;
  /** How many processes the kernel's OOM killer has killed in the group, if it says. */
  oomKills(): number | undefined;
  /** SIGKILLs everything in the group (thawing it as needed) and waits until it is empty. */
  killAll(timeoutMs?: number): Promise<void>;
  /** Removes the group's directories (after killAll); idempotent. */
  remove(): Promise<void>;
}

export type V1Controller = "memory" | "cpu" | "cpuacct" | "pids" | "freezer";

export type CgroupRecord = { kind: "v1"; dirs: Partial<Record<V1Controller, string>> } | { kind: "v2"; dir: string };

export interface CgroupLimits {
  memoryBytes: number;
  cpuCount: number;
  pidsMax: number;
}

/** Creates sandbox groups under one parent; made by detectCgroups(). */
export interface CgroupDriver {
  readonly kind: "v1" | "v2";
  /** e.g. "cgroup v1 (memory, cpu, pids, freezer)" */
  readonly description: string;
  create(name: string, limits: CgroupLimits): SandboxCgroup;
  /** The group create(name) made, if it still exists (a start a dead server never recorded). */
  find(name: string): SandboxCgroup | undefined;
  /**
   * Removes the groups under the parent that hold no process and were made
   * more than `minAgeMs` ago: what sandboxes a killed server (or a host
   * crash) never cleaned up left behind. A group with a process in it (a
   * live or paused sandbox of any server on the host) stays: the kernel
   * refuses to remove it. Returns the names removed.
   */
  sweep(minAgeMs: number): string[];
}

/** The CFS period every cpu limit uses (100 ms, the kernel's default). */
export const CPU_PERIOD_US = 100_000;

export function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return undefined;
  }
}

export function readNumber(path: string): number | undefined {
  const t = readText(path);
  if (t === undefined || t === "" || t === "max") return undefined;
  const n = Number(t);
  return Number.isFinite(n) ? n : undefined;
}

/** `key value` lines (memory.stat, cpu.stat, cgroup.events) as a map. */
export function readKeyed(path: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of (readText(path) ?? "").split("\n")) {
    const [k, v] = line.split(" ");
    if (k && v !== undefined) out.set(k, Number(v));
  }
  return out;
}

/** Writes a control file; false when the kernel refuses (missing controller, no permission). */
export function tryWrite(path: string, value: string): boolean {
  try {
    writeFileSync(path, value);
    return true;
  } catch {
    return false;
  }
}

export function readPids(procsFile: string): number[] {
  const t = readText(procsFile);
  if (!t) return [];
  return t.split("\n").map(Number).filter((n) => Number.isInteger(n) && n > 0);
}

export function makeGroupDir(dir: string): void {
  mkdirSync(dir, { recursive: true });
}

/** rmdir a cgroup, retrying while the kernel still tears the last exited tasks down. */
export async function removeGroupDir(dir: string): Promise<void> {
  let lastErr: unknown;
  const ok = await waitFor(
    () => {
      try {
        rmdirSync(dir);
        return true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") return true;
        lastErr = err;
        return false;
      }
    },
    2_000,
    5,
  );
  if (!ok) throw new Error(`cannot remove cgroup ${dir}: ${(lastErr as Error | undefined)?.message ?? "busy"}`);
}

export function groupExists(dir: string): boolean {
  return existsSync(join(dir, "cgroup.procs"));
}

/**
 * How many tasks all sandboxes together may hold (the parent group's
 * pids.max): LOCALE2B_PIDS_MAX_TOTAL, else three quarters of what the kernel
 * allows (the smaller of pid_max and threads-max), so sandboxes never take
 * the host's last process ids however many there are.
 */
export function allSandboxesPidsMax(env: NodeJS.ProcessEnv = process.env): number {
  const set = Number(setting("LOCALE2B_PIDS_MAX_TOTAL", env));
  if (Number.isInteger(set) && set > 0) return set;
  const pidMax = readNumber("/proc/sys/kernel/pid_max") ?? 32768;
  const threadsMax = readNumber("/proc/sys/kernel/threads-max") ?? pidMax;
  return Math.max(1024, Math.floor(Math.min(pidMax, threadsMax) * 0.75));
}

/**
 * The child groups of `parent` (directories) that hold no process and whose
 * directory is older than `minAgeMs`: candidates for CgroupDriver.sweep().
 */
export function emptyOldGroups(parent: string, minAgeMs: number, now = Date.now()): string[] {
  let names: string[];
  try {
    names = readdirSync(parent, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);
  } catch {
    return [];
  }
  return names.filter((name) => {
    const dir = join(parent, name);
    try {
      if (now - statSync(dir).mtimeMs < minAgeMs) return false;
    } catch {
      return false;
    }
    return groupExists(dir) && readPids(join(dir, "cgroup.procs")).length === 0;
  });
}

/** rmdir without waiting; false when the kernel refuses (a process or a child group in it). */
export function tryRemoveGroupDir(dir: string): boolean {
  try {
    rmdirSync(dir);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT";
  }
}
