import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, posix } from "node:path";
import { cgroupMounts, processGroups } from "../../control-plane/runtimes/process/cgroup-detect.js";

/**
 * Host-side memory and process accounting for sandboxes: PSS/RSS of
 * processes, MemAvailable, and which host processes belong to a sandbox
 * (its cgroup's cgroup.procs, else a /proc scan).
 */

export interface ProcMemory {
  /** Proportional set size (shared pages split between the processes mapping them), bytes. */
  pss: number;
  /** Resident set size, bytes. */
  rss: number;
}

const kb = (text: string, field: string): number | undefined => {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text);
  return m ? Number(m[1]) * 1024 : undefined;
};

let smapsRollup: boolean | undefined;

/** Whether this kernel has /proc/<pid>/smaps_rollup (Linux >= 4.14); else PSS falls back to RSS. */
export function hasPss(): boolean {
  smapsRollup ??= existsSync("/proc/self/smaps_rollup");
  return smapsRollup;
}

/**
 * PSS and RSS of one process; undefined when it is gone (or not readable).
 * `space` names its address space: processes cloned with CLONE_VM but not as
 * threads (gVisor's systrap stubs: several host processes per guest process)
 * have one, and each one's smaps_rollup counts all of it.
 */
export function procMemory(pid: number): (ProcMemory & { space?: string }) | undefined {
  try {
    if (hasPss()) {
      const t = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
      const rss = kb(t, "Rss");
      const pss = kb(t, "Pss");
      // A kernel thread or a zombie has an empty smaps_rollup.
      if (rss === undefined || pss === undefined) return undefined;
      // The whole rollup (the span of its mappings, with ASLR, and every counter to the kB) is the
      // same only for one address space read by its several processes.
      return { pss, rss, space: t };
    }
    const rss = kb(readFileSync(`/proc/${pid}/status`, "utf8"), "VmRSS");
    return rss === undefined ? undefined : { pss: rss, rss };
  } catch {
    return undefined;
  }
}

/** A process's private anonymous resident memory (RssAnon in /proc/<pid>/status: its heaps), bytes. */
export function rssAnon(pid: number): number | undefined {
  try {
    return kb(readFileSync(`/proc/${pid}/status`, "utf8"), "RssAnon");
  } catch {
    return undefined;
  }
}

/**
 * Summed PSS and RSS of processes (those gone meanwhile count 0), and how
 * many were counted; an address space shared by several processes counts once.
 */
export function sumMemory(pids: Iterable<number>): ProcMemory & { count: number } {
  let pss = 0;
  let rss = 0;
  let count = 0;
  const spaces = new Set<string>();
  for (const pid of pids) {
    const m = procMemory(pid);
    if (!m) continue;
    if (m.space !== undefined) {
      if (spaces.has(m.space)) continue;
      spaces.add(m.space);
    }
    pss += m.pss;
    rss += m.rss;
    count++;
  }
  return { pss, rss, count };
}

/** /proc/meminfo fields, bytes. */
export function meminfo(): { total: number; available: number } {
  const t = readFileSync("/proc/meminfo", "utf8");
  return { total: kb(t, "MemTotal") ?? 0, available: kb(t, "MemAvailable") ?? kb(t, "MemFree") ?? 0 };
}

/** Every process: pid → {ppid, cmdline (NUL-separated args joined by spaces)}. */
export function processTable(): Map<number, { ppid: number; cmdline: string }> {
  const out = new Map<number, { ppid: number; cmdline: string }>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "latin1");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0").join(" ");
      out.set(Number(name), { ppid, cmdline });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** `roots` and all their descendants in `table`. */
export function withDescendants(roots: Iterable<number>, table: Map<number, { ppid: number }>): Set<number> {
  const children = new Map<number, number[]>();
  for (const [pid, { ppid }] of table) {
    const list = children.get(ppid) ?? [];
    list.push(pid);
    children.set(ppid, list);
  }
  const out = new Set<number>();
  const queue = [...roots];
  while (queue.length) {
    const p = queue.pop()!;
    if (out.has(p)) continue;
    out.add(p);
    queue.push(...(children.get(p) ?? []));
  }
  return out;
}

/** Processes whose command line contains `needle`, with their descendants. */
export function pidsByCmdline(needle: string, table = processTable()): Set<number> {
  const roots = [...table].filter(([, p]) => p.cmdline.includes(needle)).map(([pid]) => pid);
  return withDescendants(roots, table);
}

let parentsCache: string[] | undefined;

/**
 * Folders the process runtime may put sandbox groups in (see
 * control-plane/runtimes/process/cgroup-detect.ts): `locale2b` under the
 * control plane's own group in each hierarchy, next to it, or at the root;
 * or $LOCALE2B_CGROUP_PARENT. The control plane is our child, so its groups
 * are ours.
 */
export function sandboxCgroupParents(): string[] {
  if (parentsCache) return parentsCache;
  const own = processGroups("self");
  const out = new Set<string>();
  if (process.env.LOCALE2B_CGROUP_PARENT) out.add(process.env.LOCALE2B_CGROUP_PARENT);
  for (const m of cgroupMounts()) {
    const group = m.fstype === "cgroup2" ? own.get("") : m.superOptions.map((c) => own.get(c)).find((g) => g !== undefined);
    const rel = group === undefined ? ".." : posix.relative(m.root, group);
    const ownDir = rel.startsWith("..") ? m.mountpoint : join(m.mountpoint, rel);
    out.add(join(ownDir, "locale2b"));
    out.add(join(dirname(ownDir), "locale2b"));
    out.add(join(m.mountpoint, "locale2b"));
  }
  parentsCache = [...out];
  return parentsCache;
}

/** The cgroup directories of a sandbox (one per v1 hierarchy, or one v2 group); empty when it has none. */
export function sandboxCgroupDirs(sandboxId: string): string[] {
  return sandboxCgroupParents()
    .map((p) => join(p, sandboxId))
    .filter((d) => existsSync(join(d, "cgroup.procs")));
}

function readPids(file: string): number[] {
  try {
    return readFileSync(file, "utf8").split("\n").map(Number).filter((n) => Number.isInteger(n) && n > 0);
  } catch {
    return [];
  }
}

/**
 * Host pids of a sandbox's processes: its cgroup's cgroup.procs when it has
 * a cgroup, else every process whose command line names the sandbox's
 * directory (unshare, the namespace's init shell, envd: all carry
 * `<dataDir>/sandboxes/<id>`) and their descendants.
 */
export function sandboxPids(sandboxId: string, sandboxDir: string, table?: Map<number, { ppid: number; cmdline: string }>): { pids: Set<number>; via: "cgroup" | "cmdline" } {
  const dirs = sandboxCgroupDirs(sandboxId);
  const pids = new Set<number>();
  for (const d of dirs) for (const p of readPids(join(d, "cgroup.procs"))) pids.add(p);
  if (dirs.length) return { pids, via: "cgroup" };
  return { pids: pidsByCmdline(sandboxDir, table), via: "cmdline" };
}

/** The memory cgroup's own count for a sandbox (v1 memory.usage_in_bytes, v2 memory.current), if it has one. */
export function cgroupMemoryUsage(sandboxId: string): number | undefined {
  for (const d of sandboxCgroupDirs(sandboxId)) {
    for (const f of ["memory.current", "memory.usage_in_bytes"]) {
      try {
        const n = Number(readFileSync(join(d, f), "utf8").trim());
        if (Number.isFinite(n)) return n;
      } catch {
        // not this hierarchy
      }
    }
  }
  return undefined;
}
