/**
 * CPU use as a sandbox's stats report it: percent of its vCPUs, between two
 * readings of a cumulative CPU-time counter (a cgroup's usage, a VMM's
 * utime + stime).
 */
export class CpuMeter {
  private last: { ns: number; at: bigint };

  constructor(
    private readonly cpuCount: number,
    startNs = 0,
  ) {
    this.last = { ns: startNs, at: process.hrtime.bigint() };
  }

  /** The counter starts again (a new process: its CPU time begins at `ns`). */
  reset(ns = 0): void {
    this.last = { ns, at: process.hrtime.bigint() };
  }

  /** Percent since the previous reading, 0..100; 0 when the counter went back (a restarted process). */
  percent(ns: number): number {
    const now = process.hrtime.bigint();
    const wall = Number(now - this.last.at);
    const used = ns - this.last.ns;
    this.last = { ns, at: now };
    return wall > 0 && used >= 0 ? Math.min(100, (used / (wall * Math.max(1, this.cpuCount))) * 100) : 0;
  }
}
