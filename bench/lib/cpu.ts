import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks per second for /proc/<pid>/stat times (USER_HZ, 100 on Linux). */
const USER_HZ = 100;

/**
 * CPU time a process has used so far (user + system, its own threads, and
 * with `reapedChildren` the children it has waited for), in seconds. On a shared machine this is steadier than wall
 * time: it shows what a transfer costs, whatever else is running.
 */
export function processCpuSeconds(pid: number, opts: { reapedChildren?: boolean } = {}): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name, which is in parentheses and may hold spaces.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  // utime, stime; then cutime, cstime: children it has waited for (envd's `--sendfile` senders).
  const own = Number(fields[11]) + Number(fields[12]);
  return (opts.reapedChildren ? own + Number(fields[13]) + Number(fields[14]) : own) / USER_HZ;
}

/** This process's CPU time so far (every thread), in seconds. */
export function selfCpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** The `--spawn-helper` child of an envd (rootfs/init/spawn.c), once envd has started one. */
export function spawnHelperPid(envdPid: number): number | undefined {
  try {
    for (const task of readdirSync(`/proc/${envdPid}/task`)) {
      for (const child of readFileSync(`/proc/${envdPid}/task/${task}/children`, "utf8").trim().split(/\s+/).filter(Boolean)) {
        if (readFileSync(`/proc/${child}/cmdline`, "utf8").split("\0").includes("--spawn-helper")) return Number(child);
      }
    }
  } catch {
    // gone meanwhile
  }
  return undefined;
}
