import { existsSync } from "node:fs";
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
  removeGroupDir,
  tryRemoveGroupDir,
  tryWrite,
  type CgroupDriver,
  type CgroupLimits,
  type CgroupRecord,
  type SandboxCgroup,
} from "./cgroups.js";
import { signalPids, waitFor } from "./procfs.js";

const FREEZE_TIMEOUT_MS = 5_000;

/** A sandbox group on cgroup v2: one directory; freeze and kill are core files, limits need their controllers. */
export class V2Cgroup implements SandboxCgroup {
  readonly kind = "v2";

  constructor(private readonly dir: string) {}

  get record(): CgroupRecord {
    return { kind: "v2", dir: this.dir };
  }

  get procsFiles(): string[] {
    return [join(this.dir, "cgroup.procs")];
  }

  get canFreeze(): boolean {
    return existsSync(join(this.dir, "cgroup.freeze"));
  }

  exists(): boolean {
    return groupExists(this.dir);
  }

  pids(): number[] {
    return readPids(join(this.dir, "cgroup.procs"));
  }

  private events(): Map<string, number> {
    return readKeyed(join(this.dir, "cgroup.events"));
  }

  async freeze(): Promise<void> {
    const file = join(this.dir, "cgroup.freeze");
    if (!tryWrite(file, "1")) throw new Error(`cannot write ${file}`);
    const ok = await waitFor(() => this.events().get("frozen") === 1, FREEZE_TIMEOUT_MS, 1);
    if (!ok) {
      tryWrite(file, "0");
      throw new Error(`the sandbox did not freeze within ${FREEZE_TIMEOUT_MS} ms`);
    }
  }

  async thaw(): Promise<void> {
    const file = join(this.dir, "cgroup.freeze");
    if (!tryWrite(file, "0")) throw new Error(`cannot write ${file}`);
    await waitFor(() => this.events().get("frozen") !== 1, 2_000, 1);
  }

  frozen(): boolean {
    return this.events().get("frozen") === 1;
  }

  memoryUsage(): number | undefined {
    const current = readNumber(join(this.dir, "memory.current"));
    if (current === undefined) return undefined;
    const inactive = readKeyed(join(this.dir, "memory.stat")).get("inactive_file") ?? 0;
    return Math.max(0, current - inactive);
  }

  memoryLimit(): number | undefined {
    return readNumber(join(this.dir, "memory.max"));
  }

  setBackground(background: boolean): void {
    // cpu.weight: 1 is the minimum, 100 the default (absent without the cpu controller: nothing to do).
    tryWrite(join(this.dir, "cpu.weight"), background ? "1" : "100");
  }

  cpuNs(): number | undefined {
    // cpu.stat's usage_usec is there even without the cpu controller.
    const usec = readKeyed(join(this.dir, "cpu.stat")).get("usage_usec");
    return usec === undefined ? undefined : usec * 1000;
  }

  oomKills(): number | undefined {
    return readKeyed(join(this.dir, "memory.events")).get("oom_kill");
  }

  async killAll(timeoutMs = 5_000): Promise<void> {
    const killFile = join(this.dir, "cgroup.kill");
    const hasKill = existsSync(killFile);
    let last = 0;
    const empty = await waitFor(
      () => {
        const pids = this.pids();
        if (pids.length === 0 && this.events().get("populated") !== 1) return true;
        if (Date.now() - last > 50) {
          last = Date.now();
          // cgroup.kill (Linux 5.14+) kills frozen tasks too and races no forks; else signal each pid and thaw.
          if (!(hasKill && tryWrite(killFile, "1"))) {
            signalPids(pids, "SIGKILL");
            tryWrite(join(this.dir, "cgroup.freeze"), "0");
          }
        }
        return false;
      },
      timeoutMs,
      2,
    );
    if (!empty) throw new Error(`processes survived SIGKILL in the sandbox's cgroup: ${this.pids().join(", ")}`);
  }

  async remove(): Promise<void> {
    await removeGroupDir(this.dir);
  }
}

/** Creates v2 groups under one parent whose subtree_control enables what it can. */
export class V2Driver implements CgroupDriver {
  readonly kind = "v2";

  constructor(
    readonly parent: string,
    /** Controllers enabled for the parent's children: some of memory, cpu, pids. */
    readonly controllers: string[],
  ) {
    if (controllers.includes("pids")) tryWrite(join(parent, "pids.max"), String(allSandboxesPidsMax()));
  }

  get description(): string {
    return `cgroup v2 (${["freezer", ...this.controllers].join(", ")}) under ${this.parent}`;
  }

  find(name: string): V2Cgroup | undefined {
    const group = new V2Cgroup(join(this.parent, name));
    return group.exists() ? group : undefined;
  }

  sweep(minAgeMs: number): string[] {
    return emptyOldGroups(this.parent, minAgeMs).filter((name) => tryRemoveGroupDir(join(this.parent, name)));
  }

  create(name: string, limits: CgroupLimits): V2Cgroup {
    const dir = join(this.parent, name);
    makeGroupDir(dir);
    if (this.controllers.includes("memory")) {
      tryWrite(join(dir, "memory.max"), String(limits.memoryBytes));
      tryWrite(join(dir, "memory.swap.max"), "0");
    }
    if (this.controllers.includes("cpu") && limits.cpuCount > 0) {
      tryWrite(join(dir, "cpu.max"), `${Math.round(limits.cpuCount * CPU_PERIOD_US)} ${CPU_PERIOD_US}`);
    }
    if (this.controllers.includes("pids")) tryWrite(join(dir, "pids.max"), String(limits.pidsMax));
    return new V2Cgroup(dir);
  }
}
