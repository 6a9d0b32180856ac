import { join } from "node:path";
import {
  allSandboxesPidsMax,
  emptyOldGroups,
  CPU_PERIOD_US,
  groupExists,
  makeGroupDir,
  readKeyed,
  readNumber,
  readPids,
  readText,
  removeGroupDir,
  tryRemoveGroupDir,
  tryWrite,
  type CgroupDriver,
  type CgroupLimits,
  type CgroupRecord,
  type SandboxCgroup,
  type V1Controller,
} from "./cgroups.js";
import { signalPids, waitFor } from "./procfs.js";

/** How long freezing may take before pause gives up (tasks in uninterruptible sleep can delay it). */
const FREEZE_TIMEOUT_MS = 5_000;

/** A sandbox group on cgroup v1: one directory per controller hierarchy. */
export class V1Cgroup implements SandboxCgroup {
  readonly kind = "v1";

  constructor(private readonly dirs: Partial<Record<V1Controller, string>>) {}

  get record(): CgroupRecord {
    return { kind: "v1", dirs: { ...this.dirs } };
  }

  private uniqueDirs(): string[] {
    return [...new Set(Object.values(this.dirs).filter((d): d is string => !!d))];
  }

  get procsFiles(): string[] {
    return this.uniqueDirs().map((d) => join(d, "cgroup.procs"));
  }

  get canFreeze(): boolean {
    return !!this.dirs.freezer;
  }

  exists(): boolean {
    return this.uniqueDirs().some(groupExists);
  }

  pids(): number[] {
    const all = new Set<number>();
    for (const f of this.procsFiles) for (const p of readPids(f)) all.add(p);
    return [...all];
  }

  private freezerState(): string | undefined {
    return this.dirs.freezer ? readText(join(this.dirs.freezer, "freezer.state")) : undefined;
  }

  async freeze(): Promise<void> {
    const dir = this.dirs.freezer;
    if (!dir) throw new Error("no cgroup freezer for this sandbox");
    const file = join(dir, "freezer.state");
    if (!tryWrite(file, "FROZEN")) throw new Error(`cannot write ${file}`);
    let n = 0;
    // FREEZING until every task is frozen; writing FROZEN again retries tasks that were busy.
    const ok = await waitFor(
      () => {
        const s = readText(file);
        if (s === "FROZEN") return true;
        if (++n % 50 === 0) tryWrite(file, "FROZEN");
        return false;
      },
      FREEZE_TIMEOUT_MS,
      1,
    );
    if (!ok) {
      tryWrite(file, "THAWED");
      throw new Error(`the sandbox did not freeze within ${FREEZE_TIMEOUT_MS} ms (${file} reads ${readText(file)})`);
    }
  }

  async thaw(): Promise<void> {
    const dir = this.dirs.freezer;
    if (!dir) throw new Error("no cgroup freezer for this sandbox");
    const file = join(dir, "freezer.state");
    if (!tryWrite(file, "THAWED")) throw new Error(`cannot write ${file}`);
    await waitFor(() => readText(file) === "THAWED", 2_000, 1);
  }

  frozen(): boolean {
    const s = this.freezerState();
    return s === "FROZEN" || s === "FREEZING";
  }

  memoryUsage(): number | undefined {
    if (!this.dirs.memory) return undefined;
    const usage = readNumber(join(this.dirs.memory, "memory.usage_in_bytes"));
    if (usage === undefined) return undefined;
    const inactive = readKeyed(join(this.dirs.memory, "memory.stat")).get("total_inactive_file") ?? 0;
    return Math.max(0, usage - inactive);
  }

  memoryLimit(): number | undefined {
    return this.dirs.memory ? readNumber(join(this.dirs.memory, "memory.limit_in_bytes")) : undefined;
  }

  setBackground(background: boolean): void {
    // cpu.shares: 2 is the kernel's minimum, 1024 its default.
    if (this.dirs.cpu) tryWrite(join(this.dirs.cpu, "cpu.shares"), background ? "2" : "1024");
  }

  cpuNs(): number | undefined {
    return this.dirs.cpuacct ? readNumber(join(this.dirs.cpuacct, "cpuacct.usage")) : undefined;
  }

  oomKills(): number | undefined {
    return this.dirs.memory ? readKeyed(join(this.dirs.memory, "memory.oom_control")).get("oom_kill") : undefined;
  }

  async killAll(timeoutMs = 5_000): Promise<void> {
    // Frozen tasks take the SIGKILL only once thawed: signal first, then thaw.
    let last = 0;
    const empty = await waitFor(
      () => {
        const pids = this.pids();
        if (pids.length === 0) return true;
        if (Date.now() - last > 50) {
          last = Date.now();
          signalPids(pids, "SIGKILL");
          if (this.dirs.freezer) tryWrite(join(this.dirs.freezer, "freezer.state"), "THAWED");
        }
        return false;
      },
      timeoutMs,
      2,
    );
    if (!empty) throw new Error(`processes survived SIGKILL in the sandbox's cgroup: ${this.pids().join(", ")}`);
  }

  async remove(): Promise<void> {
    for (const dir of this.uniqueDirs()) await removeGroupDir(dir);
  }
}

/** Creates v1 groups under `<hierarchy>/<our own group>/locale2b/<name>` for each usable controller. */
export class V1Driver implements CgroupDriver {
  readonly kind = "v1";

  constructor(private readonly parents: Partial<Record<V1Controller, string>>) {
    if (parents.pids) tryWrite(join(parents.pids, "pids.max"), String(allSandboxesPidsMax()));
  }

  get description(): string {
    return `cgroup v1 (${Object.keys(this.parents).join(", ")})`;
  }

  find(name: string): V1Cgroup | undefined {
    const dirs: Partial<Record<V1Controller, string>> = {};
    for (const [ctrl, parent] of Object.entries(this.parents) as [V1Controller, string][]) dirs[ctrl] = join(parent, name);
    const group = new V1Cgroup(dirs);
    return group.exists() ? group : undefined;
  }

  sweep(minAgeMs: number): string[] {
    const names = new Set<string>();
    for (const parent of new Set(Object.values(this.parents))) for (const name of emptyOldGroups(parent, minAgeMs)) names.add(name);
    const removed: string[] = [];
    for (const name of names) {
      // Only a name empty in every hierarchy it is in: never half of a live sandbox's group.
      const dirs = [...new Set(Object.values(this.parents))].map((p) => join(p, name)).filter((d) => groupExists(d));
      if (dirs.some((d) => readPids(join(d, "cgroup.procs")).length > 0)) continue;
      if (dirs.map((d) => tryRemoveGroupDir(d)).every(Boolean)) removed.push(name);
    }
    return removed;
  }

  create(name: string, limits: CgroupLimits): V1Cgroup {
    const dirs: Partial<Record<V1Controller, string>> = {};
    for (const [ctrl, parent] of Object.entries(this.parents) as [V1Controller, string][]) {
      dirs[ctrl] = join(parent, name);
    }
    const group = new V1Cgroup(dirs);
    try {
      for (const dir of new Set(Object.values(dirs))) makeGroupDir(dir);
      if (dirs.memory) {
        tryWrite(join(dirs.memory, "memory.limit_in_bytes"), String(limits.memoryBytes));
        // Where swap accounting exists, swap counts against the same limit.
        tryWrite(join(dirs.memory, "memory.memsw.limit_in_bytes"), String(limits.memoryBytes));
      }
      if (dirs.cpu && limits.cpuCount > 0) {
        tryWrite(join(dirs.cpu, "cpu.cfs_period_us"), String(CPU_PERIOD_US));
        tryWrite(join(dirs.cpu, "cpu.cfs_quota_us"), String(Math.round(limits.cpuCount * CPU_PERIOD_US)));
      }
      if (dirs.pids) tryWrite(join(dirs.pids, "pids.max"), String(limits.pidsMax));
    } catch (err) {
      void group.remove().catch(() => undefined);
      throw err;
    }
    return group;
  }
}
