import { existsSync, rmSync, statfsSync } from "node:fs";
import type { Logger } from "pino";
import { DeathWatch } from "../death-watch.js";
import { CpuMeter } from "../../host/cpu-meter.js";
import { logEntries, tailLines } from "../../host/log-tail.js";
import type { Instance, InstanceStats } from "../runtime.js";
import type { SnapshotKind } from "../../domain/snapshot.js";
import { copyImage } from "../process/disk-snapshot.js";
import { groupRecordOf, openCgroup } from "../process/cgroup-detect.js";
import type { CgroupRecord, SandboxCgroup } from "../process/cgroups.js";
import { isRunning, procStat } from "../process/procfs.js";
import { releaseDevice } from "../net/nft.js";
import { deleteNetns } from "../net/netns.js";
import { updateVethPolicy, type NetRecord } from "../net/veth.js";
import type { EgressPolicy } from "../../domain/network.js";
import { GUEST } from "../../images/layout.js";
import { removeSandboxDir, snapshotCheckpoint, snapshotDisk, type GvisorLayout } from "./rootfs.js";
import type { Runsc } from "./runsc.js";
import { setTimeout as sleep } from "node:timers/promises";
import { copyDir, syncFs } from "./host-ops.js";
import { claimDialSocket, quiesceListener, relistenListener } from "./host-listener.js";
import { OomRanks } from "./oom-ranks.js";
import { bindVolumes, unbindVolumes, type GvisorVolume } from "./volume-binds.js";

/** How often the sandbox's sentry process is checked for life. */
const WATCH_INTERVAL_MS = 500;
/**
 * A sentry that dies this soon after an OOM kill in its cgroup is taken to have
 * run out of memory: in a burst the kernel kills stubs for seconds before it
 * takes the sentry, and a poll may count the sentry's own kill before its
 * process is gone (or its cgroup may be gone with it).
 */
const OOM_RECENT_MS = 15_000;
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
  /** Paused to disk: no sentry runs, the sandbox is its checkpoint image (layout.checkpoint). */
  checkpointed?: true;
  /** Started by a restore (a warm-start image or a memory snapshot), not booted. */
  restored?: true;
  /** Its volumes (host mount, path inside): bound again for a restore after a pause. */
  volumes?: GvisorVolume[];
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
  checkpointed?: boolean;
  restored?: boolean;
  volumes?: GvisorVolume[];
  /** Where the volume helper is compiled (the runtime's images dir). */
  imagesDir: string;
  log: Logger;
}

/** How long a killed sentry may take to be gone (its memory unmapped). */
const KILL_WAIT_MS = 10_000;

/** The rules on a sandbox's veth: its policy, else everything (internet access) or nothing. */
export function effectivePolicy(policy: EgressPolicy | undefined, allowInternetAccess: boolean): EgressPolicy {
  return policy ?? (allowInternetAccess ? { allow: [], deny: [] } : { allow: [], deny: ["0.0.0.0/0"] });
}

/**
 * One runsc sandbox. It is not our child (runsc detaches it), so it outlives
 * the control plane; its death is seen by polling its sentry's pid. Pause is
 * to disk (runsc checkpoint, then the sentry stops): open connections end.
 */
export class GvisorInstance implements Instance {
  readonly sandboxId: string;
  readonly socketPath: string;
  readonly defaultUser = GUEST.user;
  readonly defaultWorkdir = GUEST.home;
  /** Restored from a warm-start image taken after the template's start command ran (gvisor-runtime.ts sets it). */
  warmedUp = false;
  /** A cold runsc start under load (2 shared cores) can take several seconds. */
  readonly readyTimeoutMs = 60_000;
  private readonly deaths: DeathWatch;
  private killed = false;
  /** A pause or resume is replacing the sentry. */
  private busy = false;
  /** A paused sandbox's `runsc delete`, still running (see pause()). */
  private deleting: Promise<void> | undefined;
  /** A pause ends the sentry, and every connection to it: the pool drops them (and again after the resume). */
  readonly pauseConnections = "drop";
  private policy: EgressPolicy | undefined;
  private readonly cpu: CpuMeter;
  private pid_: number;
  private startTime: number;
  private cgroup: SandboxCgroup | undefined;
  /** Paused to disk (see pause()). */
  private checkpointed: boolean;
  /** The cgroup's OOM-kill count at the last look. */
  private ooms: number;
  /** When a look last found that count grown (0: never). */
  private oomSeenAt = 0;
  /** Who the kernel's OOM killer takes first: the sandbox's processes, not its sentry, init or envd (a new one per sentry). */
  private oomRanks: OomRanks;

  constructor(private readonly o: GvisorInstanceInit) {
    this.sandboxId = o.sandboxId;
    this.socketPath = o.layout.dialSocket;
    this.policy = o.policy;
    this.pid_ = o.pid;
    this.startTime = o.startTime;
    this.cgroup = o.cgroup;
    this.checkpointed = o.checkpointed ?? false;
    this.ooms = o.cgroup?.oomKills() ?? 0;
    this.oomRanks = new OomRanks(o.log);
    this.deaths = new DeathWatch(WATCH_INTERVAL_MS, () => {
      if (this.checkpointed || this.busy) return; // no sentry while paused to disk, or while it changes
      if (!isRunning(this.pid_, this.startTime)) this.died("the sandbox exited");
      else {
        // An OOM kill the sandbox lived through (one of its processes, not the sentry) is old news, soon.
        const ooms = this.cgroup?.oomKills() ?? this.ooms;
        if (ooms > this.ooms) this.oomSeenAt = Date.now();
        this.ooms = ooms;
        this.rankOom();
      }
    });
    this.cpu = new CpuMeter(o.cpuCount, o.cgroup?.cpuNs() ?? 0);
  }

  /** True once envd's socket is where the control plane dials it (host-listener.ts: never anything else put there). */
  vsockReady(): boolean {
    this.rankOom();
    return claimDialSocket(this.o.layout, this.o.log, this.sandboxId);
  }

  /** Ranks the sandbox's host processes for the OOM killer (oom-ranks.ts): new ones since the last look. */
  private rankOom(): void {
    if (this.cgroup && !this.checkpointed) this.oomRanks.update(this.cgroup.pids());
  }

  get persisted(): Record<string, unknown> {
    const p: PersistedGvisorInstance = {
      v: 1,
      pid: this.pid_,
      startTime: this.startTime,
      cgroup: this.cgroup?.record ?? null,
      cpuCount: this.o.cpuCount,
      memoryMB: this.o.memoryMB,
      allowInternetAccess: this.o.allowInternetAccess,
      ...(this.o.netns ? { netns: this.o.netns } : {}),
      ...(this.o.net ? { net: this.o.net } : {}),
      ...(this.policy ? { policy: this.policy } : {}),
      ...(this.checkpointed ? { checkpointed: true as const } : {}),
      ...(this.o.restored ? { restored: true as const } : {}),
      ...(this.o.volumes?.length ? { volumes: this.o.volumes } : {}),
    };
    return { ...p };
  }

  /** The sandbox's sentry process on the host. */
  get pid(): number {
    return this.pid_;
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
    await this.deleting;
    await runsc.destroy();
    if (net) await releaseDevice(net.device, sandboxId).catch((err: unknown) => log.warn({ err }, "cannot remove the sandbox's network device"));
    if (netns) await deleteNetns(netns);
    await removeSandboxDir(layout).catch((err: unknown) => log.warn({ err }, "cannot remove the sandbox's files"));
  }

  private died(why: string): void {
    if (this.deaths.over || this.killed) return;
    // A memcg OOM may kill the sentry, and with it the whole sandbox (not one process in it).
    const oom = (this.cgroup?.oomKills() ?? 0) > this.ooms || Date.now() - this.oomSeenAt < OOM_RECENT_MS;
    const reason = oom ? `the sandbox ran out of memory (${this.o.memoryMB} MiB) and was stopped` : why;
    this.o.log.warn({ reason, log: this.logTail(5) }, "sandbox exited");
    this.deaths.report(reason);
    void this.release();
  }

  /**
   * Pause to disk: the init closes its host listener and every relayed
   * connection (runsc cannot save a sandbox holding a host socket), the
   * sandbox is frozen, runsc saves its memory and state into
   * layout.checkpoint (uncompressed); only then is the sentry stopped, and
   * its memory freed. A checkpoint that fails leaves the sandbox running, listening
   * again, and says why. Open streams end; new calls work after the resume.
   */
  async pause(): Promise<void> {
    if (this.checkpointed) return;
    const { runsc, layout, log } = this.o;
    const started = Date.now();
    this.busy = true;
    try {
      rmSync(layout.checkpoint, { recursive: true, force: true });
      let frozen = false;
      try {
        await this.quiesce();
        // Frozen from before the checkpoint until the sentry stops: a sandbox left running after its
        // checkpoint went on writing to its disk, and the restore rewound its memory to before those
        // writes (a counter appended to a file showed repeated counts after a resume).
        await runsc.pause();
        frozen = true;
        await runsc.checkpoint(layout.checkpoint);
      } catch (err) {
        rmSync(layout.checkpoint, { recursive: true, force: true });
        if (frozen) await runsc.resume().catch((e: unknown) => log.error({ err: e }, "the sandbox does not run again after a failed checkpoint"));
        await this.relisten().catch((e: unknown) => log.error({ err: e }, "the sandbox does not listen again after a failed checkpoint"));
        throw err;
      }
      this.checkpointed = true;
      // `runsc delete` took 1.2-2 s here even with the sentry already dead (runsc waits on its own
      // back-off): the sentry is killed now, its stubs and memory go with it, and runsc's state and
      // cgroups are removed in the background. A resume or kill waits for that first.
      await this.killSentry();
      this.deleting = runsc.destroy().finally(() => (this.deleting = undefined));
      rmSync(layout.dialSocket, { force: true });
      log.info({ ms: Date.now() - started }, "gVisor sandbox paused to disk");
    } finally {
      this.busy = false;
    }
  }

  /** SIGKILL to the sentry (its stubs die with it), waited for until it is gone: its memory is freed then. */
  private async killSentry(): Promise<void> {
    try {
      process.kill(this.pid_, "SIGKILL");
    } catch {
      return; // gone already
    }
    const deadline = Date.now() + KILL_WAIT_MS;
    while (isRunning(this.pid_, this.startTime) && Date.now() < deadline) await sleep(5);
  }

  /** A sandbox paused to disk is restored (same id, bundle, network); one paused in memory (runsc pause, older servers) goes on. */
  async resume(): Promise<void> {
    if (!this.checkpointed) {
      await this.o.runsc.resume();
      return;
    }
    const { runsc, layout, netns, sandboxId, log } = this.o;
    const started = Date.now();
    this.busy = true;
    try {
      rmSync(layout.socket, { force: true });
      rmSync(layout.dialSocket, { force: true });
      await this.deleting;
      await runsc.destroy(); // what a pause cut short may have left
      await bindVolumes(this.o.imagesDir, layout.dir, this.o.volumes ?? []);
      try {
        await runsc.restore({ bundle: layout.bundle, network: netns ? "sandbox" : "none", logFile: layout.log, imagePath: layout.checkpoint });
      } finally {
        await unbindVolumes(layout.dir);
      }
      const state = await runsc.startedPid();
      if (!state || !isRunning(state.pid)) throw new Error(`the sandbox stopped right after its restore (${state?.status ?? "unknown to runsc"})`);
      this.pid_ = state.pid;
      this.startTime = procStat(state.pid)?.startTime ?? 0;
      this.cgroup = openCgroup(groupRecordOf(state.pid, sandboxId), sandboxId);
      this.ooms = this.cgroup?.oomKills() ?? 0;
      this.oomSeenAt = 0;
      this.cpu.reset(this.cgroup?.cpuNs() ?? 0);
      this.oomRanks = new OomRanks(log);
      this.checkpointed = false;
      await this.relisten();
      rmSync(layout.checkpoint, { recursive: true, force: true });
      log.info({ ms: Date.now() - started, pid: state.pid }, "gVisor sandbox restored");
    } catch (err) {
      if (!this.checkpointed) throw err;
      await runsc.destroy(); // the image stays: the next resume tries again
      throw err;
    } finally {
      this.busy = false;
    }
  }

  /**
   * What this sandbox can be snapshotted as: its disk alone, or with its
   * memory (processes go on). Not memory with volumes: its checkpoint holds
   * their mounts, and a sandbox restored from it in another bundle (its own
   * volumeMounts, or none) would not have them (a pause restores into the
   * same bundle, so it works).
   */
  snapshotKinds(): SnapshotKind[] {
    return this.o.volumes?.length ? ["filesystem"] : ["memory", "filesystem"];
  }

  /**
   * A snapshot into `dest`: the disk image (disk.ext4) and, for `memory`, a
   * checkpoint image. Both are of one instant: the sandbox is frozen (runsc
   * pause) from before the checkpoint until the disk is copied, then runs on.
   * Its open connections end (the checkpoint needs the init's host listener
   * closed); new ones work. Paused to disk, the pause's own image is copied.
   */
  async snapshot(dest: string, opts: { kind: SnapshotKind; paused: boolean }): Promise<void> {
    const { runsc, layout } = this.o;
    if (this.checkpointed) {
      await copyImage(layout.disk, snapshotDisk(dest));
      if (opts.kind === "memory") await copyDir(layout.checkpoint, snapshotCheckpoint(dest));
      return;
    }
    this.busy = true;
    let frozen = false;
    try {
      if (opts.kind === "memory") await this.quiesce();
      // Files only: gVisor's kernel may still hold written data in its own cache (a checkpoint would
      // carry it); sync writes it through to the disk first.
      else await runsc.cmd(["exec", runsc.id, "/bin/sync"], 60_000);
      await runsc.pause();
      frozen = true;
      if (opts.kind === "memory") await runsc.checkpoint(snapshotCheckpoint(dest));
      await syncFs(layout.diskMount);
      await copyImage(layout.disk, snapshotDisk(dest));
    } finally {
      if (frozen) await runsc.resume().catch((err: unknown) => this.o.log.error({ err }, "the sandbox does not run again after a snapshot"));
      if (opts.kind === "memory") await this.relisten().catch((err: unknown) => this.o.log.error({ err }, "the sandbox does not listen again after a snapshot"));
      this.busy = false;
    }
  }

  /** A sandbox restored from another's memory snapshot: listen again, and take its own name. */
  async restoredAs(hostname: string): Promise<void> {
    await this.relisten();
    // sethostname needs CAP_SYS_ADMIN, which the sandbox's processes lack: this one command gets it,
    // in gVisor's kernel only (the sandbox's own UTS namespace; the host is not involved).
    await this.o.runsc
      .cmd(["exec", "-user", "0:0", "-cap", "CAP_SYS_ADMIN", this.o.sandboxId, "/bin/hostname", hostname])
      .catch((err: unknown) => this.o.log.warn({ err }, "cannot set the restored sandbox's hostname"));
  }

  private quiesce(): Promise<void> {
    return quiesceListener(this.o.runsc, this.o.layout);
  }

  private relisten(): Promise<void> {
    return relistenListener(this.o.runsc, this.o.layout, () => this.vsockReady());
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
    if (this.killed || this.deaths.dead) return false;
    return this.checkpointed ? existsSync(this.o.layout.checkpoint) : isRunning(this.pid_, this.startTime);
  }

  /** CPU and memory from the sandbox's host cgroup (gVisor's /proc/stat reads zeros inside); disk from its writable layer. */
  async stats(): Promise<InstanceStats> {
    const cg = this.checkpointed ? undefined : this.cgroup;
    const cpuUsedPct = cg ? this.cpu.percent(cg.cpuNs() ?? 0) : 0;
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
    return this.checkpointed ? 0 : (this.cgroup?.memoryUsage() ?? 0);
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

  /** The sandbox's console (init, envd) and runsc's errors, newest last (at most the log's last 8 MiB). */
  async logs(): Promise<{ timestamp: number; line: string }[]> {
    return logEntries(this.o.layout.log);
  }
}

