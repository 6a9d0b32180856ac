import type { ChildProcess } from "node:child_process";
import { statfsSync } from "node:fs";
import type { Logger } from "pino";
import { CpuMeter } from "../../host/cpu-meter.js";
import { logEntries, tailLines } from "../../host/log-tail.js";
import { DeathWatch } from "../death-watch.js";
import type { Instance, InstanceStats } from "../runtime.js";
import type { SnapshotKind } from "../../domain/snapshot.js";
import { copyImage, snapshotDiskPath, syncSandboxFs } from "./disk-snapshot.js";
import type { SandboxCgroup } from "./cgroups.js";
import type { IsolationMode } from "./namespaces.js";
import { isRunning, pidNamespace, pidsInNamespace, procStat, signalGroup, signalPids, waitFor } from "./procfs.js";
import { removeSandboxFs, type SandboxLayout } from "./sandbox-fs.js";
import { releaseDevice } from "../net/nft.js";
import { attachVeth, updateVethPolicy, type NetRecord } from "../net/veth.js";
import type { EgressPolicy } from "../../domain/network.js";

/** The launcher exits as the sandbox's init did (128 + n: killed by signal n). */
function exitReason(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal) return `the sandbox was killed by ${signal}`;
  if (code !== null && code > 128) return `the sandbox's init was killed by signal ${code - 128}`;
  return `the sandbox's init exited with status ${code}`;
}

/** How often a sandbox that is not our child (after a restart) is checked for life. */
const WATCH_INTERVAL_MS = 500;
const MiB = 1024 * 1024;

/** What the store keeps so a restarted control plane can re-adopt the sandbox. */
export interface PersistedProcessInstance {
  v: 2;
  /** The process the sandbox lives as long as (the launcher; unshare in user-namespace mode). */
  pid: number;
  /** Its start time (clock ticks after boot): tells it apart from a later process with a recycled pid. */
  startTime: number;
  /** sandbox mode: the sandbox's first process (its namespaces are the sandbox's). */
  initPid?: number;
  initStartTime?: number;
  mode: IsolationMode;
  cgroup: unknown;
  cpuCount: number;
  memoryMB: number;
  user?: string;
  workdir?: string;
  /** The sandbox's veth, when it has a way out, and the egress policy on it. */
  net?: NetRecord;
  policy?: EgressPolicy;
}

export interface ProcessInstanceInit {
  sandboxId: string;
  layout: SandboxLayout;
  pid: number;
  startTime: number;
  initPid?: number;
  initStartTime?: number;
  mode: IsolationMode;
  cgroup: SandboxCgroup | undefined;
  cpuCount: number;
  memoryMB: number;
  user?: string;
  workdir?: string;
  log: Logger;
  /** Set when we spawned it (not after a restart): its exit event is immediate. */
  child?: ChildProcess;
  net?: NetRecord;
  policy?: EgressPolicy;
}

/**
 * One sandbox of the process runtime: a detached process (the launcher, or
 * unshare in user-namespace mode) whose namespaces run the sandbox, in a
 * cgroup where the host allows.
 */
export class ProcessInstance implements Instance {
  readonly sandboxId: string;
  readonly socketPath: string;
  readonly defaultUser?: string;
  readonly defaultWorkdir?: string;
  private readonly deaths: DeathWatch;
  private killed = false;
  private pidNs: string | undefined;
  private readonly cpu: CpuMeter;
  private net: NetRecord | undefined;
  private policy: EgressPolicy | undefined;

  constructor(private readonly o: ProcessInstanceInit) {
    this.sandboxId = o.sandboxId;
    this.socketPath = o.layout.socket;
    this.defaultUser = o.user;
    this.defaultWorkdir = o.workdir;
    this.net = o.net;
    this.policy = o.policy;
    o.child?.once("exit", (code, signal) => this.died(exitReason(code, signal)));
    let goneOnce = false;
    this.deaths = new DeathWatch(WATCH_INTERVAL_MS, () => {
      if (isRunning(o.pid, o.startTime)) return;
      // Our own child's exit event says how it ended (a signal, a code): give it one more look to arrive.
      if (o.child && o.child.exitCode === null && o.child.signalCode === null && !goneOnce) return void (goneOnce = true);
      this.died("the sandbox exited");
    });
    // A new sandbox has used no CPU yet; an adopted one starts counting now.
    this.cpu = new CpuMeter(o.cpuCount, o.child ? 0 : this.cpuNs());
  }

  get persisted(): Record<string, unknown> {
    const p: PersistedProcessInstance = {
      v: 2,
      pid: this.o.pid,
      startTime: this.o.startTime,
      ...(this.o.initPid ? { initPid: this.o.initPid, initStartTime: this.o.initStartTime } : {}),
      mode: this.o.mode,
      cgroup: this.o.cgroup?.record ?? null,
      cpuCount: this.o.cpuCount,
      memoryMB: this.o.memoryMB,
      user: this.o.user,
      workdir: this.o.workdir,
      ...(this.net ? { net: this.net } : {}),
      ...(this.policy ? { policy: this.policy } : {}),
    };
    return { ...p };
  }

  /** The host pid the sandbox lives as long as. */
  get pid(): number {
    return this.o.pid;
  }

  /** Host pid of the sandbox's init (sandbox mode). */
  get initPid(): number | undefined {
    return this.o.initPid;
  }

  get mode(): IsolationMode {
    return this.o.mode;
  }

  foreground(): void {
    this.o.cgroup?.setBackground(false);
  }

  /** The sandbox's cgroup, if the host gave it one. */
  get cgroup(): SandboxCgroup | undefined {
    return this.o.cgroup;
  }

  /** The sandbox's host network device, if it has one. */
  get netDevice(): string | undefined {
    return this.net?.device;
  }

  /** Host pids of every process in the sandbox. */
  pids(): number[] {
    if (this.o.cgroup) return this.o.cgroup.pids();
    if (this.o.mode === "none") return isRunning(this.o.pid) ? [this.o.pid] : [];
    if (!this.pidNs) {
      // Right after spawn the pid may still be the shell that has yet to exec unshare: only a
      // namespace other than ours is the sandbox's.
      const ns = pidNamespace(this.o.initPid ?? this.o.pid, this.o.initPid === undefined);
      if (!ns || ns === pidNamespace(process.pid)) return [];
      this.pidNs = ns;
    }
    return pidsInNamespace(this.pidNs);
  }

  /** Everything of the sandbox's that is not its processes: cgroup, network, files. */
  private async release(): Promise<void> {
    const { log } = this.o;
    const cg = this.o.cgroup;
    if (cg) await cg.remove().catch((err: unknown) => log.warn({ err }, "cannot remove the sandbox's cgroup"));
    if (this.net) await releaseDevice(this.net.device, this.o.sandboxId).catch((err: unknown) => log.warn({ err }, "cannot remove the sandbox's network"));
    try {
      removeSandboxFs(this.o.layout);
    } catch (err) {
      log.warn({ err }, "cannot remove the sandbox's files");
    }
  }

  private died(why: string): void {
    if (this.deaths.over || this.killed) return;
    const oom = this.o.cgroup?.oomKills();
    const reason = oom ? `${why}; the sandbox ran out of memory (${this.o.memoryMB} MiB)` : why;
    this.o.log.warn({ reason, log: this.logTail(5) }, "sandbox exited");
    // The namespaces are gone with its init; kill any straggler the cgroup still holds, then release the rest.
    const cg = this.o.cgroup;
    void (cg ? cg.killAll() : Promise.resolve())
      .catch(() => undefined)
      .then(() => this.release());
    this.deaths.report(reason);
  }

  async pause(): Promise<void> {
    const cg = this.o.cgroup;
    if (cg?.canFreeze) {
      await cg.freeze();
      return;
    }
    // No freezer: stop every process of the sandbox; repeat for ones forked meanwhile.
    await waitFor(
      () => {
        const running = this.pids().filter((p) => procStat(p)?.state !== "T");
        signalPids(running, "SIGSTOP");
        return running.length === 0;
      },
      2_000,
      2,
    );
    if (this.o.mode === "none") signalGroup(this.o.pid, "SIGSTOP");
  }

  async resume(): Promise<void> {
    const cg = this.o.cgroup;
    if (cg?.canFreeze) {
      await cg.thaw();
      return;
    }
    signalPids(this.pids(), "SIGCONT");
    if (this.o.mode === "none") signalGroup(this.o.pid, "SIGCONT");
  }

  async kill(): Promise<void> {
    if (this.killed) return;
    this.killed = true;
    this.deaths.stop();
    const { pid, startTime, log } = this.o;
    const cg = this.o.cgroup;
    if (cg) await cg.killAll().catch((err: unknown) => log.warn({ err }, "cannot kill every process in the sandbox's cgroup"));
    if (isRunning(pid, startTime)) {
      const rest = cg ? [] : this.pids();
      // The launcher's death takes the sandbox's init with it (its parent-death signal; unshare's
      // --kill-child), and the kernel then kills everything in the pid namespace; SIGCONT in case
      // it was stopped by a pause.
      signalGroup(pid, "SIGKILL");
      signalPids([pid, ...rest], "SIGKILL");
      signalGroup(pid, "SIGCONT");
    }
    await waitFor(() => !isRunning(pid, startTime), 5_000, 2);
    // The init too: its mounts (the disk's loop device) go with the last process of its namespace.
    if (this.o.initPid) await waitFor(() => !isRunning(this.o.initPid!, this.o.initStartTime), 5_000, 2);
    await this.release();
  }

  /** Sandbox mode keeps the writable layer in its own image: that can be snapshotted. */
  snapshotKinds(): SnapshotKind[] {
    return this.o.mode === "sandbox" && this.o.initPid ? ["filesystem"] : [];
  }

  /** Filesystem-only: frozen (unless paused already), flushed, its image copied, thawed. */
  async snapshot(dest: string, opts: { kind: SnapshotKind; paused: boolean }): Promise<void> {
    if (opts.kind !== "filesystem" || !this.snapshotKinds().includes(opts.kind)) {
      throw new Error(`this sandbox cannot take a ${opts.kind} snapshot (it can take: ${this.snapshotKinds().join(", ") || "none"})`);
    }
    if (!opts.paused) await this.pause();
    try {
      await syncSandboxFs(this.o.initPid!);
      await copyImage(this.o.layout.disk, snapshotDiskPath(dest));
    } finally {
      if (!opts.paused) await this.resume();
    }
  }

  /**
   * Replaces the sandbox's egress rules (undefined: none). A sandbox created
   * without internet access has only `lo`: its first policy gives it a veth.
   */
  async updateEgress(policy: EgressPolicy | undefined): Promise<void> {
    const p = policy ?? { allow: [], deny: [] };
    if (this.net) {
      await updateVethPolicy(this.net, this.o.sandboxId, p, this.o.log);
      this.policy = policy;
      return;
    }
    if (this.o.mode !== "sandbox" || !this.o.initPid) {
      throw new Error(
        "this sandbox has no network of its own to filter (it shares the host's, or has none, on this host): create it with an egress policy to change its rules later",
      );
    }
    this.net = await attachVeth(this.o.sandboxId, this.o.initPid, p, this.o.log);
    this.policy = policy;
  }

  async alive(): Promise<boolean> {
    return !this.killed && !this.deaths.dead && isRunning(this.o.pid, this.o.startTime);
  }

  private cpuNs(): number {
    const fromCgroup = this.o.cgroup?.cpuNs();
    if (fromCgroup !== undefined) return fromCgroup;
    return this.pids().reduce((sum, p) => sum + (procStat(p)?.cpuNs ?? 0), 0);
  }

  async stats(): Promise<InstanceStats> {
    const cpuUsedPct = this.cpu.percent(this.cpuNs());
    const memUsedBytes = this.o.cgroup?.memoryUsage() ?? this.pids().reduce((sum, p) => sum + (procStat(p)?.rssBytes ?? 0), 0);
    let diskUsedBytes = 0;
    let diskTotalBytes = 0;
    try {
      // The sandbox's own disk (its writable layer) as its root sees it, else the data dir's filesystem.
      const fs = statfsSync(this.o.initPid ? `/proc/${this.o.initPid}/root/` : this.o.layout.dir);
      diskUsedBytes = (fs.blocks - fs.bfree) * fs.bsize;
      diskTotalBytes = fs.blocks * fs.bsize;
    } catch {
      // gone (killed)
    }
    return {
      cpuCount: this.o.cpuCount,
      cpuUsedPct,
      memUsedBytes,
      memTotalBytes: this.o.memoryMB * MiB,
      diskUsedBytes,
      diskTotalBytes,
    };
  }

  detach(): void {
    this.deaths.stop();
  }

  onExit(listener: (reason: string) => void): void {
    this.deaths.onExit(listener);
  }

  private logTail(n: number): string[] {
    return tailLines(this.o.layout.log, n);
  }

  /** envd's and the init's log, newest last (at most the file's last 8 MiB). */
  async logs(): Promise<{ timestamp: number; line: string }[]> {
    return logEntries(this.o.layout.log);
  }

}
