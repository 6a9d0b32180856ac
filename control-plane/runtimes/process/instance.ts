import type { ChildProcess } from "node:child_process";
import { readFileSync, statfsSync } from "node:fs";
import type { Logger } from "pino";
import { DeathWatch } from "../death-watch.js";
import type { Instance, InstanceStats } from "../runtime.js";
import type { SandboxCgroup } from "./cgroups.js";
import type { IsolationMode } from "./namespaces.js";
import { isRunning, pidNamespace, pidsInNamespace, procStat, signalGroup, signalPids, waitFor } from "./procfs.js";
import { removeSandboxFs, type SandboxLayout } from "./sandbox-fs.js";
import type { EgressRecord } from "./egress-net.js";
import { applyPolicy, releaseDevice } from "../egress-nft.js";
import type { EgressPolicy } from "../../manager/egress.js";

/** unshare exits as the namespace's init did, which exits as envd did (128 + n: killed by signal n). */
function exitReason(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal) return `envd was killed by ${signal}`;
  if (code !== null && code > 128) return `envd was killed by signal ${code - 128}`;
  return `envd exited with status ${code}`;
}

/** How often a sandbox that is not our child (after a restart) is checked for life. */
const WATCH_INTERVAL_MS = 500;
const MiB = 1024 * 1024;

/** What the store keeps so a restarted control plane can re-adopt the sandbox. */
export interface PersistedProcessInstance {
  v: 1;
  /** The unshare process (host pid): the namespace's init dies with it, and it exits when the sandbox does. */
  pid: number;
  /** Its start time (clock ticks after boot): tells it apart from a later process with a recycled pid. */
  startTime: number;
  mode: IsolationMode;
  cgroup: unknown;
  cpuCount: number;
  memoryMB: number;
  user?: string;
  workdir?: string;
  /** The sandbox's own network, when it has an egress policy. */
  egress?: EgressRecord;
}

export interface ProcessInstanceInit {
  sandboxId: string;
  layout: SandboxLayout;
  pid: number;
  startTime: number;
  mode: IsolationMode;
  cgroup: SandboxCgroup | undefined;
  cpuCount: number;
  memoryMB: number;
  user?: string;
  workdir?: string;
  log: Logger;
  /** Set when we spawned it (not after a restart): its exit event is immediate. */
  child?: ChildProcess;
  egress?: EgressRecord;
}

/**
 * One sandbox of the process runtime: an unshare process (a detached
 * process group, not tied to the control plane's life) whose namespace
 * runs envd, optionally in a cgroup.
 */
export class ProcessInstance implements Instance {
  readonly sandboxId: string;
  readonly socketPath: string;
  readonly defaultUser?: string;
  readonly defaultWorkdir?: string;
  private readonly deaths: DeathWatch;
  private killed = false;
  private pidNs: string | undefined;
  private cpuSample: { ns: number; at: bigint };

  constructor(private readonly o: ProcessInstanceInit) {
    this.sandboxId = o.sandboxId;
    this.socketPath = o.layout.socket;
    this.defaultUser = o.user;
    this.defaultWorkdir = o.workdir;
    o.child?.once("exit", (code, signal) => this.died(exitReason(code, signal)));
    this.deaths = new DeathWatch(WATCH_INTERVAL_MS, () => {
      if (!isRunning(o.pid, o.startTime)) this.died("envd exited");
    });
    // A new sandbox has used no CPU yet; an adopted one starts counting now.
    this.cpuSample = { ns: o.child ? 0 : this.cpuNs(), at: process.hrtime.bigint() };
  }

  get persisted(): Record<string, unknown> {
    const p: PersistedProcessInstance = {
      v: 1,
      pid: this.o.pid,
      startTime: this.o.startTime,
      mode: this.o.mode,
      cgroup: this.o.cgroup?.record ?? null,
      cpuCount: this.o.cpuCount,
      memoryMB: this.o.memoryMB,
      user: this.o.user,
      workdir: this.o.workdir,
      ...(this.o.egress ? { egress: this.o.egress } : {}),
    };
    return { ...p };
  }

  /** The unshare process's host pid (the sandbox lives as long as it does). */
  get pid(): number {
    return this.o.pid;
  }

  /** The sandbox's cgroup, if the host gave it one. */
  get cgroup(): SandboxCgroup | undefined {
    return this.o.cgroup;
  }

  /** Host pids of every process in the sandbox. */
  pids(): number[] {
    if (this.o.cgroup) return this.o.cgroup.pids();
    if (this.o.mode === "none") return isRunning(this.o.pid) ? [this.o.pid] : [];
    if (!this.pidNs) {
      // Right after spawn the pid may still be the shell that has yet to exec unshare: only a
      // namespace other than ours is the sandbox's.
      const ns = pidNamespace(this.o.pid, true);
      if (!ns || ns === pidNamespace(process.pid)) return [];
      this.pidNs = ns;
    }
    return pidsInNamespace(this.pidNs);
  }

  private died(why: string): void {
    if (this.deaths.over || this.killed) return;
    const oom = this.o.cgroup?.oomKills();
    const reason = oom ? `${why}; the sandbox ran out of memory (${this.o.memoryMB} MiB)` : why;
    this.o.log.warn({ reason, log: this.logTail(5) }, "sandbox envd exited");
    // The namespace is gone with its init; release the cgroup.
    const cg = this.o.cgroup;
    if (cg) void cg.killAll().then(() => cg.remove()).catch((err: unknown) => this.o.log.warn({ err }, "cannot clean up the sandbox's cgroup"));
    if (this.o.egress) void releaseDevice(this.o.egress.device, this.o.sandboxId);
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
      // unshare's death takes the namespace's init with it (--kill-child), and the kernel then
      // kills everything in the pid namespace; SIGCONT in case it was stopped by a pause.
      signalGroup(pid, "SIGKILL");
      signalPids([pid, ...rest], "SIGKILL");
      signalGroup(pid, "SIGCONT");
    }
    await waitFor(() => !isRunning(pid, startTime), 5_000, 2);
    if (cg) await cg.remove().catch((err: unknown) => log.warn({ err }, "cannot remove the sandbox's cgroup"));
    if (this.o.egress) await releaseDevice(this.o.egress.device, this.o.sandboxId);
    try {
      removeSandboxFs(this.o.layout);
    } catch (err) {
      log.warn({ err }, "cannot remove the sandbox's files");
    }
  }

  async updateEgress(policy: EgressPolicy | undefined): Promise<void> {
    if (!this.o.egress) {
      throw new Error(
        "this sandbox was created without network.allowOut/denyOut, so it has no network of its own to filter (it shares the host's, or has none): create it with an egress policy to change its rules later",
      );
    }
    // One nft transaction: the sandbox's connections keep their conntrack state.
    await applyPolicy(this.o.egress.device, this.o.sandboxId, policy ?? { allow: [], deny: [] }, this.o.log);
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
    const now = process.hrtime.bigint();
    const ns = this.cpuNs();
    const wall = Number(now - this.cpuSample.at);
    const cpuUsedPct = wall > 0 ? Math.min(100, Math.max(0, ((ns - this.cpuSample.ns) / (wall * this.o.cpuCount)) * 100)) : 0;
    this.cpuSample = { ns, at: now };
    const memUsedBytes = this.o.cgroup?.memoryUsage() ?? this.pids().reduce((sum, p) => sum + (procStat(p)?.rssBytes ?? 0), 0);
    let diskUsedBytes = 0;
    let diskTotalBytes = 0;
    try {
      const fs = statfsSync(this.o.layout.dir);
      diskUsedBytes = (fs.blocks - fs.bfree) * fs.bsize;
      diskTotalBytes = fs.blocks * fs.bsize;
    } catch {
      // the directory is gone (killed)
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

  private logText(): string {
    try {
      return readFileSync(this.o.layout.log, "utf8");
    } catch {
      return "";
    }
  }

  private logTail(n: number): string[] {
    return this.logText().split("\n").filter(Boolean).slice(-n);
  }

  async logs(): Promise<{ timestamp: number; line: string }[]> {
    return this.logText()
      .split("\n")
      .filter(Boolean)
      .map((line) => {
        let timestamp = Date.now();
        try {
          timestamp = (JSON.parse(line) as { time?: number }).time ?? timestamp;
        } catch {
          // not JSON (the set-up script's messages): keep the line as it is
        }
        return { timestamp, line };
      });
  }
}
