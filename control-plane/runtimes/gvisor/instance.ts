import { lstatSync, readFileSync, renameSync, rmSync, statfsSync, type Stats } from "node:fs";
import type { Logger } from "pino";
import { DeathWatch } from "../death-watch.js";
import type { Instance, InstanceStats } from "../runtime.js";
import type { CgroupRecord, SandboxCgroup } from "../process/cgroups.js";
import { isRunning } from "../process/procfs.js";
import { releaseDevice } from "../net/nft.js";
import { deleteNetns } from "../net/netns.js";
import { updateVethPolicy, type NetRecord } from "../net/veth.js";
import type { EgressPolicy } from "../net/policy.js";
import { GUEST } from "../../images/layout.js";
import { removeSandboxDir, type GvisorLayout } from "./rootfs.js";
import type { Runsc } from "./runsc.js";

/** How often the sandbox's sentry process is checked for life. */
const WATCH_INTERVAL_MS = 500;
const MiB = 1024 * 1024;

/** What the store keeps so a restarted control plane can re-adopt the sandbox. */
export interface PersistedGvisorInstance {
  v: 1;
  /** The sandbox (sentry) process, and its start time (tells it apart from a recycled pid). */
  pid: number;
  startTime: number;
  cgroup: CgroupRecord | null;
  cpuCount: number;
  memoryMB: number;
  allowInternetAccess: boolean;
  /** The named network namespace runsc's netstack runs on, and the veth in it. */
  netns?: string;
  net?: NetRecord;
  /** The egress policy the sandbox was given (undefined: none beyond allowInternetAccess). */
  policy?: EgressPolicy;
}

export interface GvisorInstanceInit {
  sandboxId: string;
  layout: GvisorLayout;
  runsc: Runsc;
  pid: number;
  startTime: number;
  cgroup: SandboxCgroup | undefined;
  cpuCount: number;
  memoryMB: number;
  allowInternetAccess: boolean;
  netns?: string;
  net?: NetRecord;
  policy?: EgressPolicy;
  log: Logger;
}

/** The rules on a sandbox's veth: its policy, else everything (internet access) or nothing. */
export function effectivePolicy(policy: EgressPolicy | undefined, allowInternetAccess: boolean): EgressPolicy {
  return policy ?? (allowInternetAccess ? { allow: [], deny: [] } : { allow: [], deny: ["0.0.0.0/0"] });
}

/**
 * One runsc sandbox. It is not our child (runsc detaches it), so it outlives
 * the control plane; its death is seen by polling its sentry's pid. Pause is
 * in memory (`runsc pause`): open connections survive it.
 */
function lstatOrUndefined(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch {
    return undefined;
  }
}

/** A Unix socket itself at `path` (a symlink to one does not count). */
function socketAt(path: string): boolean {
  return lstatOrUndefined(path)?.isSocket() ?? false;
}

export class GvisorInstance implements Instance {
  readonly sandboxId: string;
  readonly socketPath: string;
  readonly defaultUser = GUEST.user;
  readonly defaultWorkdir = GUEST.home;
  /** A cold runsc start under load (2 shared cores) can take several seconds. */
  readonly readyTimeoutMs = 60_000;
  private readonly deaths: DeathWatch;
  private killed = false;
  private policy: EgressPolicy | undefined;
  private cpuSample: { ns: number; at: bigint };
  /** The cgroup's OOM-kill count at the last look. */
  private ooms: number;

  constructor(private readonly o: GvisorInstanceInit) {
    this.sandboxId = o.sandboxId;
    this.socketPath = o.layout.dialSocket;
    this.policy = o.policy;
    this.ooms = o.cgroup?.oomKills() ?? 0;
    this.deaths = new DeathWatch(WATCH_INTERVAL_MS, () => {
      if (!isRunning(o.pid, o.startTime)) this.died("the sandbox exited");
      // An OOM kill the sandbox lived through (one process's address space, not the sentry) is old news.
      else this.ooms = o.cgroup?.oomKills() ?? this.ooms;
    });
    this.cpuSample = { ns: o.cgroup?.cpuNs() ?? 0, at: process.hrtime.bigint() };
  }

  /**
   * True once envd's socket is where the control plane dials it. The init
   * creates it in the host directory the sandbox shares, where root in the
   * sandbox could swap it for a symlink to any Unix socket on the host, and
   * the control plane's dials would follow it. So the socket is renamed out
   * of that directory (a listening socket keeps working under a new name)
   * as soon as it is there, and only a real socket is: anything else there
   * (a symlink, a file) is never dialed, and the create times out saying so.
   */
  vsockReady(): boolean {
    if (socketAt(this.o.layout.dialSocket)) return true;
    if (!socketAt(this.o.layout.socket)) {
      if (lstatOrUndefined(this.o.layout.socket)) {
        this.o.log.warn({ sandboxId: this.sandboxId }, "envd's socket in the sandbox's shared host directory is not a socket (tampered with from inside?): not dialing it");
      }
      return false;
    }
    try {
      renameSync(this.o.layout.socket, this.o.layout.dialSocket);
    } catch {
      return false;
    }
    // rename() moves whatever is there at that moment: check what arrived.
    if (socketAt(this.o.layout.dialSocket)) return true;
    rmSync(this.o.layout.dialSocket, { force: true });
    return false;
  }

  get persisted(): Record<string, unknown> {
    const p: PersistedGvisorInstance = {
      v: 1,
      pid: this.o.pid,
      startTime: this.o.startTime,
      cgroup: this.o.cgroup?.record ?? null,
      cpuCount: this.o.cpuCount,
      memoryMB: this.o.memoryMB,
      allowInternetAccess: this.o.allowInternetAccess,
      ...(this.o.netns ? { netns: this.o.netns } : {}),
      ...(this.o.net ? { net: this.o.net } : {}),
      ...(this.policy ? { policy: this.policy } : {}),
    };
    return { ...p };
  }

  /** The sandbox's sentry process on the host. */
  get pid(): number {
    return this.o.pid;
  }

  get layout(): GvisorLayout {
    return this.o.layout;
  }

  get netDevice(): string | undefined {
    return this.o.net?.device;
  }

  /** runsc's state, the sandbox's network and files: everything once the sandbox is gone. */
  private async release(): Promise<void> {
    const { log, runsc, net, netns, sandboxId, layout } = this.o;
    await runsc.destroy();
    if (net) await releaseDevice(net.device, sandboxId).catch((err: unknown) => log.warn({ err }, "cannot remove the sandbox's network device"));
    if (netns) await deleteNetns(netns);
    await removeSandboxDir(layout).catch((err: unknown) => log.warn({ err }, "cannot remove the sandbox's files"));
  }

  private died(why: string): void {
    if (this.deaths.over || this.killed) return;
    // A memcg OOM may kill the sentry, and with it the whole sandbox (not one process in it).
    const oom = (this.o.cgroup?.oomKills() ?? 0) > this.ooms;
    const reason = oom ? `the sandbox ran out of memory (${this.o.memoryMB} MiB) and was stopped` : why;
    this.o.log.warn({ reason, log: this.logTail(5) }, "sandbox exited");
    this.deaths.report(reason);
    void this.release();
  }

  async pause(): Promise<void> {
    await this.o.runsc.pause();
  }

  async resume(): Promise<void> {
    await this.o.runsc.resume();
  }

  async kill(): Promise<void> {
    if (this.killed) return;
    this.killed = true;
    this.deaths.stop();
    await this.release();
  }

  /**
   * Replaces the rules on the sandbox's veth (undefined: back to what
   * allowInternetAccess says). Only a sandbox with a network of its own has
   * rules to change.
   */
  async updateEgress(policy: EgressPolicy | undefined): Promise<void> {
    if (!this.o.net) {
      throw new Error("this sandbox has loopback only (this host cannot give gVisor sandboxes a veth: it needs root, nft, ip and nsenter)");
    }
    await updateVethPolicy(this.o.net, this.o.sandboxId, effectivePolicy(policy, this.o.allowInternetAccess), this.o.log);
    this.policy = policy;
  }

  async alive(): Promise<boolean> {
    return !this.killed && !this.deaths.dead && isRunning(this.o.pid, this.o.startTime);
  }

  /** CPU and memory from the sandbox's host cgroup (gVisor's /proc/stat reads zeros inside); disk from its writable layer. */
  async stats(): Promise<InstanceStats> {
    const cg = this.o.cgroup;
    const now = process.hrtime.bigint();
    const ns = cg?.cpuNs() ?? 0;
    const wall = Number(now - this.cpuSample.at);
    const cpuUsedPct = wall > 0 ? Math.min(100, Math.max(0, ((ns - this.cpuSample.ns) / (wall * this.o.cpuCount)) * 100)) : 0;
    this.cpuSample = { ns, at: now };
    let diskUsedBytes = 0;
    let diskTotalBytes = 0;
    try {
      const fs = statfsSync(this.o.layout.diskMount);
      diskUsedBytes = (fs.blocks - fs.bfree) * fs.bsize;
      diskTotalBytes = fs.blocks * fs.bsize;
    } catch {
      // gone (killed)
    }
    return {
      cpuCount: this.o.cpuCount,
      cpuUsedPct,
      memUsedBytes: cg?.memoryUsage() ?? 0,
      memTotalBytes: this.o.memoryMB * MiB,
      diskUsedBytes,
      diskTotalBytes,
    };
  }

  /** Host memory the sandbox is charged for (sentry, gofer, its processes' pages). */
  hostMemoryBytes(): number {
    return this.o.cgroup?.memoryUsage() ?? 0;
  }

  detach(): void {
    this.deaths.stop();
  }

  onExit(listener: (reason: string) => void): void {
    this.deaths.onExit(listener);
  }

  private logLines(): string[] {
    try {
      return readFileSync(this.o.layout.log, "utf8").split("\n").filter(Boolean);
    } catch {
      return [];
    }
  }

  private logTail(n: number): string[] {
    return this.logLines().slice(-n);
  }

  async logs(): Promise<{ timestamp: number; line: string }[]> {
    return this.logLines().map((line) => {
      let timestamp = Date.now();
      try {
        timestamp = (JSON.parse(line) as { time?: number }).time ?? timestamp;
      } catch {
        // not JSON (runsc's or the init's own words): keep the line as it is
      }
      return { timestamp, line };
    });
  }
}
