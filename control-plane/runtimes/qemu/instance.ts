import type { ChildProcess } from "node:child_process";
import { readFileSync, rmSync, statSync } from "node:fs";
import type { Logger } from "pino";
import { releaseImage } from "../../images/image-refs.js";
import { tailLines } from "../../host/log-tail.js";
import { CpuMeter } from "../../host/cpu-meter.js";
import { DeathWatch } from "../death-watch.js";
import type { GuestVolume, Instance, InstanceStats } from "../runtime.js";
import type { SnapshotKind } from "../../domain/snapshot.js";
import { backupDisk } from "./disk-snapshot.js";
import { isRunning, procStat, procTasks, waitFor } from "../process/procfs.js";
import type { VmLayout } from "./command.js";
import type { EgressPolicy } from "../../domain/network.js";
import { applyPolicy, releaseDevice } from "../net/nft.js";
import type { TapRecord } from "../firecracker/state.js";
import { ConsoleWatch } from "./console-watch.js";
import { Qmp } from "./qmp.js";

const WATCH_INTERVAL_MS = 250;
/** What the guest init prints on the console once its vsock listener is up (rootfs/init/listener.c). */
const VSOCK_UP_LINE = "locale2b-init: listening on vsock port 49983";
/** Past this, dial even without that line (a console that says something else must not make a create wait forever). */
const VSOCK_UP_FALLBACK_MS = 60_000;
const MiB = 1024 * 1024;
/** After holding the host's vsock traffic, let bytes already written reach the guest before stopping it. */
const SETTLE_MS = 30;
/** How long a pause waits for vhost-device-vsock to go idle, and how often it looks. */
const SETTLE_MAX_MS = 2_000;
const SETTLE_POLL_MS = 20;

export interface VmProcess {
  pid: number;
  startTime: number;
}

/** What the store keeps so a restarted control plane can re-adopt the VM. */
export type PersistedQemuInstance = {
  v: 1;
  qemu: VmProcess;
  vhost: VmProcess;
  cpuCount: number;
  memoryMB: number;
  accel: "kvm" | "tcg";
  bootMs?: number;
  /** The VM's tap device, when it was created with an egress policy. */
  tap?: TapRecord;
  /** One virtiofsd per volume (virtiofs.ts), and the guest's mounts of them. */
  virtiofsd?: VmProcess[];
  guestVolumes?: GuestVolume[];
};

export interface QemuInstanceInit {
  sandboxId: string;
  layout: VmLayout;
  qemu: VmProcess;
  vhost: VmProcess;
  qmp: Qmp;
  cpuCount: number;
  memoryMB: number;
  accel: "kvm" | "tcg";
  log: Logger;
  /** Set when we spawned them (not after a restart): their exit events are immediate. */
  children?: { qemu: ChildProcess; vhost: ChildProcess };
  tap?: TapRecord;
  virtiofsd?: VmProcess[];
  guestVolumes?: GuestVolume[];
}

/**
 * One microVM: a QEMU process and its vhost-device-vsock daemon (both
 * detached: they outlive a control-plane restart), driven over QMP. Pause is
 * in memory (`stop`/`cont`); the control plane keeps the VM's vsock quiet
 * meanwhile (pauseConnections "quiet").
 */
export class QemuInstance implements Instance {
  readonly sandboxId: string;
  readonly socketPath: string;
  readonly pauseConnections = "quiet";
  readonly readyTimeoutMs: number;
  readonly guestVolumes: GuestVolume[] | undefined;
  private readonly deaths: DeathWatch;
  private killed = false;
  private readonly cpu: CpuMeter;
  bootMs: number | undefined;
  private readonly born = Date.now();
  private readonly vsockUp: ConsoleWatch;
  private vringWorkerSeen = false;

  constructor(private readonly o: QemuInstanceInit) {
    this.sandboxId = o.sandboxId;
    this.socketPath = o.layout.vsock;
    this.guestVolumes = o.guestVolumes?.length ? o.guestVolumes : undefined;
    this.vsockUp = new ConsoleWatch(o.layout.console, VSOCK_UP_LINE);
    // Under emulation a guest boots in seconds, slower with several busy sandboxes on 2 cores.
    this.readyTimeoutMs = o.accel === "tcg" ? 180_000 : 30_000;
    o.children?.qemu.once("exit", (code, signal) => this.died(`QEMU exited (${signal ?? `status ${code}`})`));
    o.children?.vhost.once("exit", (code, signal) => this.died(`vhost-device-vsock exited (${signal ?? `status ${code}`})`));
    this.deaths = new DeathWatch(WATCH_INTERVAL_MS, () => {
      if (!isRunning(o.qemu.pid, o.qemu.startTime)) this.died("QEMU exited");
      else if (!isRunning(o.vhost.pid, o.vhost.startTime)) this.died("vhost-device-vsock exited");
      else if (o.virtiofsd?.some((v) => !isRunning(v.pid, v.startTime))) this.died("a virtiofsd serving one of its volumes exited");
      else if (this.vringWorkerGone()) this.died("vhost-device-vsock's vring worker exited: the VM's vsock is gone for good");
    });
    this.cpu = new CpuMeter(o.cpuCount, this.cpuNs());
  }

  get persisted(): PersistedQemuInstance {
    const o = this.o;
    return {
      v: 1,
      qemu: o.qemu,
      vhost: o.vhost,
      cpuCount: o.cpuCount,
      memoryMB: o.memoryMB,
      accel: o.accel,
      bootMs: this.bootMs,
      ...(o.tap ? { tap: o.tap } : {}),
      ...(o.virtiofsd?.length ? { virtiofsd: o.virtiofsd } : {}),
      ...(this.guestVolumes ? { guestVolumes: this.guestVolumes } : {}),
    };
  }

  async pause(): Promise<void> {
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    await this.vhostSettled();
    await this.o.qmp.execute("stop");
    const status = await this.o.qmp.status();
    if (status !== "paused") throw new Error(`QEMU reports '${status}' after stop`);
  }

  async resume(): Promise<void> {
    await this.o.qmp.execute("cont");
    const status = await this.o.qmp.status();
    if (status !== "running") throw new Error(`QEMU reports '${status}' after cont`);
  }

  /** Filesystem-only (its disk overlay); QEMU cannot migrate a VM with vhost-user vsock, so no memory. */
  snapshotKinds(): SnapshotKind[] {
    return ["filesystem"];
  }

  /** The overlay copied by QEMU at one instant, running or paused: no host traffic reaches the vsock. */
  async snapshot(dest: string, opts: { kind: SnapshotKind; paused: boolean }): Promise<void> {
    if (opts.kind !== "filesystem") throw new Error(`a QEMU microVM cannot take a ${opts.kind} snapshot (it can take: filesystem)`);
    await backupDisk(this.o.qmp, dest);
  }

  async kill(): Promise<void> {
    this.killed = true;
    this.deaths.stop();
    this.killProcesses();
    await waitFor(() => [this.o.qemu, this.o.vhost, ...(this.o.virtiofsd ?? [])].every((p) => !isRunning(p.pid, p.startTime)), 5_000, 10);
    const l = this.o.layout;
    for (const p of [l.disk, l.vhostUser, l.vsock, l.qmp]) rmSync(p, { force: true });
    releaseImage(l.dir); // its disk, the overlay on the build's image, is gone
    if (this.o.tap) await releaseDevice(this.o.tap.name, this.sandboxId);
  }

  /**
   * True once the guest's vsock device is set up, i.e. its init says it
   * listens. vhost-device-vsock 0.3.0's vring worker exits for good when a
   * host connection arrives after the guest mapped its memory but before it
   * set up the queues (about 1.5 s into a TCG boot): the VM boots, and its
   * vsock never answers. So the host dials only after that line.
   */
  vsockReady(): boolean {
    return this.vsockUp.seen() || Date.now() - this.born > VSOCK_UP_FALLBACK_MS;
  }

  /**
   * Waits (at most SETTLE_MAX_MS) until vhost-device-vsock has handled what
   * the host last did on the VM's vsock (a close just before a pause): every
   * thread asleep and no CPU used across two samples. On a busy host a close
   * it handled only after QEMU stopped the rings would break the VM's vsock.
   */
  private async vhostSettled(): Promise<void> {
    const sample = (): { busy: boolean; ticks: number } => {
      // A thread that exits between the listing and its read just drops out: the next sample decides.
      const stats = procTasks(this.o.vhost.pid).map((t) => procStat(this.o.vhost.pid, t));
      return { busy: stats.some((s) => s?.state === "R"), ticks: stats.reduce((n, s) => n + (s?.cpuNs ?? 0), 0) };
    };
    const until = Date.now() + SETTLE_MAX_MS;
    let last = sample();
    while (Date.now() < until) {
      await new Promise((r) => setTimeout(r, SETTLE_POLL_MS));
      const now = sample();
      if (!now.busy && !last.busy && now.ticks === last.ticks) return;
      last = now;
    }
    this.o.log.warn({ sandboxId: this.sandboxId }, "vhost-device-vsock still busy before a pause: stopping the VM anyway");
  }

  /** The daemon had its `vring_worker` thread and has lost it (see vsockReady). */
  private vringWorkerGone(): boolean {
    const tasks = procTasks(this.o.vhost.pid);
    if (tasks.length === 0) return false; // gone: the isRunning check says so
    const names = tasks.map((t) => {
      try {
        return readFileSync(`/proc/${this.o.vhost.pid}/task/${t}/comm`, "latin1").trim();
      } catch {
        return "";
      }
    });
    const has = names.includes("vring_worker");
    if (has) this.vringWorkerSeen = true;
    return this.vringWorkerSeen && !has;
  }

  async updateEgress(policy: EgressPolicy | undefined): Promise<void> {
    if (!this.o.tap) {
      throw new Error("this VM has no tap of its own (it was created offline, or this host cannot make taps and it uses QEMU's user-mode NAT), so there is nothing to filter: create it with an egress policy to change its rules later");
    }
    await applyPolicy(this.o.tap.name, this.sandboxId, policy ?? { allow: [], deny: [] }, this.o.log);
  }

  async alive(): Promise<boolean> {
    return !this.deaths.dead && isRunning(this.o.qemu.pid, this.o.qemu.startTime) && isRunning(this.o.vhost.pid, this.o.vhost.startTime);
  }

  async stats(): Promise<InstanceStats> {
    const cpuUsedPct = this.cpu.percent(this.cpuNs());
    let diskUsedBytes = 0;
    try {
      diskUsedBytes = statSync(this.o.layout.disk).blocks * 512;
    } catch {
      // disk gone (killed)
    }
    return {
      cpuCount: this.o.cpuCount,
      cpuUsedPct,
      memUsedBytes: Math.min(this.hostMemoryBytes(), this.o.memoryMB * MiB),
      memTotalBytes: this.o.memoryMB * MiB,
      diskUsedBytes,
      diskTotalBytes: 0,
    };
  }

  /** QEMU's resident memory: the guest's touched RAM plus the VMM's own. */
  hostMemoryBytes(): number {
    return procStat(this.o.qemu.pid)?.rssBytes ?? 0;
  }

  detach(): void {
    this.deaths.stop();
    this.o.qmp.close();
  }

  onExit(listener: (reason: string) => void): void {
    this.deaths.onExit(listener);
  }

  async logs(): Promise<{ timestamp: number; line: string }[]> {
    let mtime = Date.now();
    try {
      mtime = statSync(this.o.layout.console).mtimeMs;
    } catch {
      // no console yet
    }
    return tailLines(this.o.layout.console, 1000).map((line) => ({ timestamp: mtime, line }));
  }

  /** SIGKILLs QEMU and vhost-device-vsock (those still running and still ours). */
  private killProcesses(): void {
    this.o.qmp.close();
    for (const p of [this.o.qemu, this.o.vhost, ...(this.o.virtiofsd ?? [])]) {
      if (!isRunning(p.pid, p.startTime)) continue;
      try {
        process.kill(p.pid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
  }

  private cpuNs(): number {
    return procStat(this.o.qemu.pid)?.cpuNs ?? 0;
  }

  private died(reason: string): void {
    if (this.deaths.over || this.killed) return;
    // The other half is useless alone: a dead daemon leaves the guest unreachable, a dead QEMU leaves
    // host connections open on the daemon. Killing it closes every host connection at once.
    this.killProcesses();
    const tail = tailLines(this.o.layout.console, 5).join(" | ");
    this.o.log.warn({ reason, console: tail }, "microVM exited");
    this.deaths.reportAfter(this.o.tap ? releaseDevice(this.o.tap.name, this.sandboxId) : Promise.resolve(), reason);
  }
}
