import type { ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { tailLines } from "../../host/log-tail.js";
import { CpuMeter } from "../../host/cpu-meter.js";
import { isRunning, procStat } from "../process/procfs.js";
import { DeathWatch } from "../death-watch.js";
import type { GuestIdentity, Instance, InstanceStats } from "../runtime.js";
import type { SnapshotKind } from "../../domain/snapshot.js";
import { FirecrackerApi } from "./api-client.js";
import { consoleLines } from "./console-log.js";
import { copyRootfs, diskUsage } from "./disk.js";
import { resetJail } from "./jail.js";
import { removeVmFiles, type VmLayout } from "./layout.js";
import { deleteTap, restoreTap } from "./network.js";
import { applyPolicy, releaseDevice } from "../net/nft.js";
import type { EgressPolicy } from "../../domain/network.js";
import { moveFile, placeFile, SNAPSHOT_DISK, SNAPSHOT_MEMORY, SNAPSHOT_VMSTATE, writeSnapshotMeta } from "./snapshots.js";
import { toRecord, writeStateFile, type PersistedFirecracker } from "./state.js";
import { spawnVmm, stopVmm, waitForSocket, type Launch, type VmmProcess } from "./vmm-process.js";

/** How often a VMM that is not our child (after a restart) is checked for life. */
const WATCH_INTERVAL_MS = 500;
const MiB = 1024 * 1024;

export interface FirecrackerInstanceInit {
  record: PersistedFirecracker;
  layout: VmLayout;
  /** How to start a new Firecracker process (resume); resolved when called. */
  launch: () => Launch;
  apiTimeoutMs?: number;
  log: Logger;
  /** Set when this control plane started the process: its exit is noticed at once. */
  child?: ChildProcess;
  /** Restored from another sandbox's memory snapshot: who the guest must become. */
  restoredGuest?: GuestIdentity;
}

function exitReason(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal) return `firecracker was killed by ${signal}`;
  return `firecracker exited with status ${code}`;
}

/**
 * One Firecracker microVM. Running: a detached Firecracker process serving
 * the API on `<dir>/fc.sock` and hybrid vsock on `<dir>/vsock.sock`. Paused:
 * no process at all, only a full snapshot (VM state + memory) and the disk.
 */
export class FirecrackerInstance implements Instance {
  readonly sandboxId: string;
  readonly socketPath: string;
  /** A resume restores a snapshot into a new process: every vsock connection is reset, pools must redial. */
  readonly pauseConnections = "drop";
  readonly restoredGuest?: GuestIdentity;
  private readonly rec: PersistedFirecracker;
  private readonly deaths: DeathWatch;
  private killed = false;
  /** A pause or resume is replacing the process: its exit is expected. */
  private busy = false;
  private readonly cpu: CpuMeter;

  constructor(private readonly o: FirecrackerInstanceInit) {
    this.rec = { ...o.record };
    this.sandboxId = o.record.sandboxId;
    this.socketPath = o.record.vsock;
    this.restoredGuest = o.restoredGuest;
    if (o.child) this.follow(o.child, this.rec.pid);
    this.deaths = new DeathWatch(WATCH_INTERVAL_MS, () => {
      if (!this.busy && !this.rec.paused && !isRunning(this.rec.pid, this.rec.startTime)) this.died("firecracker exited");
    });
    this.cpu = new CpuMeter(this.rec.cpuCount, o.child ? 0 : this.cpuNs());
    this.save();
  }

  get persisted(): Record<string, unknown> {
    return toRecord(this.rec);
  }

  /** The Firecracker process's pid (0 while paused). */
  get pid(): number {
    return this.rec.pid;
  }

  get paused(): boolean {
    return this.rec.paused;
  }

  get layout(): VmLayout {
    return this.o.layout;
  }

  private api(): FirecrackerApi {
    return new FirecrackerApi(this.rec.apiSock, { timeoutMs: this.o.apiTimeoutMs });
  }

  private save(): void {
    this.rec.updatedAt = Date.now();
    try {
      writeStateFile(this.o.layout.stateFile, this.rec);
    } catch (err) {
      this.o.log.warn({ err }, "cannot write the microVM's state file");
    }
  }

  private follow(child: ChildProcess, pid: number): void {
    child.once("exit", (code, signal) => {
      if (this.busy || this.rec.paused || this.rec.pid !== pid) return;
      this.died(exitReason(code, signal));
    });
  }

  private died(why: string): void {
    if (this.deaths.over || this.killed) return;
    const tail = tailLines(this.o.layout.console, 5);
    const reason = tail.length ? `${why} (last console line: ${tail[tail.length - 1]})` : why;
    this.o.log.warn({ reason, console: tail }, "microVM exited");
    this.deaths.reportAfter(this.rec.tap ? releaseDevice(this.rec.tap.name, this.sandboxId) : Promise.resolve(), reason);
  }

  private removeSockets(): void {
    rmSync(this.rec.apiSock, { force: true });
    rmSync(this.rec.vsock, { force: true });
  }

  /**
   * Pause = PATCH /vm Paused, a Full snapshot to <dir>/snapshot/{vmstate,memory},
   * then the process is killed: a paused sandbox costs disk, not RAM.
   */
  async pause(): Promise<void> {
    if (this.killed) throw new Error("the microVM was killed");
    if (this.rec.paused) return;
    const { log, layout } = this.o;
    this.busy = true;
    try {
      const api = this.api();
      try {
        await api.pauseVm();
      } catch (err) {
        // Already paused (e.g. a pause interrupted by a restart) is fine.
        const info = await api.describeInstance().catch(() => undefined);
        if (info?.state !== "Paused") throw err;
      }
      mkdirSync(layout.host("snapshotDir"), { recursive: true });
      // Unlink, never overwrite: a VM restored from the previous snapshot still maps that memory file.
      rmSync(this.rec.snapshot.vmstate, { force: true });
      rmSync(this.rec.snapshot.memory, { force: true });
      const started = Date.now();
      try {
        await api.createSnapshot({ snapshot_type: "Full", snapshot_path: layout.vm("vmstate"), mem_file_path: layout.vm("memory") });
      } catch (err) {
        rmSync(this.rec.snapshot.vmstate, { force: true });
        rmSync(this.rec.snapshot.memory, { force: true });
        await api.resumeVm().catch((e: unknown) => log.warn({ err: e }, "cannot resume the microVM after a failed snapshot"));
        throw err;
      }
      log.debug({ ms: Date.now() - started }, "microVM snapshot written");
      // From here the snapshot is the sandbox (recorded before the process goes, for a restart in between).
      this.rec.paused = true;
      this.save();
      if (!(await stopVmm(this.rec.pid, this.rec.startTime))) {
        throw new Error(`firecracker (pid ${this.rec.pid}) did not exit after SIGKILL`);
      }
      this.removeSockets();
      if (this.rec.tap) await deleteTap(this.rec.tap.name);
      this.rec.pid = 0;
      this.rec.startTime = 0;
      this.save();
    } finally {
      this.busy = false;
    }
  }

  /**
   * Resume = a new Firecracker process loading the snapshot (resume_vm). The
   * vsock device comes back on the same uds_path (it is in the snapshot);
   * every connection made before the pause is gone.
   */
  async resume(): Promise<void> {
    if (this.killed) throw new Error("the microVM was killed");
    if (!this.rec.paused) return;
    const { log, layout } = this.o;
    const { vmstate, memory } = this.rec.snapshot;
    if (!existsSync(vmstate) || !existsSync(memory)) throw new Error(`the microVM's snapshot is missing (${vmstate}, ${memory})`);
    this.busy = true;
    try {
      // A process a failed pause could not stop must not linger next to the new one.
      if (this.rec.pid > 0) await stopVmm(this.rec.pid, this.rec.startTime);
      if (this.rec.tap) await restoreTap(this.rec.tap, this.rec.jail?.uid);
      // Firecracker binds the API socket and (from the snapshot) the vsock socket: stale files make it fail.
      this.removeSockets();
      if (this.rec.jail) resetJail(layout, this.rec.jail);
      const started = Date.now();
      const vmm: VmmProcess = spawnVmm(this.o.launch(), layout.console, layout.root, log);
      // Recorded at once (still paused: the snapshot stays the truth until it is loaded), so that a
      // restart in between finds this process instead of orphaning it.
      this.rec.pid = vmm.pid;
      this.rec.startTime = vmm.startTime;
      this.save();
      try {
        await waitForSocket(this.rec.apiSock, vmm, layout.console, "its API socket");
        await this.api().loadSnapshot({
          snapshot_path: layout.vm("vmstate"),
          mem_backend: { backend_type: "File", backend_path: layout.vm("memory") },
          resume_vm: true,
          // This VM's own socket and tap: the snapshot may be another sandbox's (a fork).
          vsock_override: { uds_path: layout.vm("vsock") },
          ...(this.rec.tap ? { network_overrides: [{ iface_id: "eth0", host_dev_name: this.rec.tap.name }] } : {}),
        });
        await waitForSocket(this.rec.vsock, vmm, layout.console, "the vsock socket", 5_000, false);
      } catch (err) {
        await stopVmm(vmm.pid, vmm.startTime);
        this.rec.pid = 0;
        this.rec.startTime = 0;
        this.save();
        this.removeSockets();
        if (this.rec.tap) await deleteTap(this.rec.tap.name);
        throw err;
      }
      // The snapshot files stay: Firecracker maps the memory file while the VM runs.
      this.rec.paused = false;
      this.save();
      if (vmm.child) this.follow(vmm.child, vmm.pid);
      this.cpu.reset();
      log.debug({ pid: vmm.pid, ms: Date.now() - started }, "microVM restored from its snapshot");
    } finally {
      this.busy = false;
    }
  }

  snapshotKinds(): SnapshotKind[] {
    return ["filesystem", "memory"];
  }

  /**
   * A snapshot into `dest` (snapshots.ts). Running: the VM is paused for the
   * capture (a memory snapshot into <dir>/capture, then a reflink copy of
   * the disk, so both are of one instant) and resumed afterwards, whatever
   * happened. Paused: its snapshot files and disk are linked and copied.
   * A filesystem-only snapshot is the disk as a power cut at that instant
   * would leave it (what the guest still caches is not in it; ext4's journal
   * recovers it at the next boot), as on qemu.
   */
  async snapshot(dest: string, opts: { kind: SnapshotKind; paused: boolean }): Promise<void> {
    if (this.killed) throw new Error("the microVM was killed");
    const { log, layout } = this.o;
    const disk = join(dest, SNAPSHOT_DISK);
    if (this.rec.paused) {
      await copyRootfs(this.rec.rootfs, disk, log);
      if (opts.kind === "memory") {
        placeFile(this.rec.snapshot.vmstate, join(dest, SNAPSHOT_VMSTATE));
        placeFile(this.rec.snapshot.memory, join(dest, SNAPSHOT_MEMORY));
      }
    } else {
      const api = this.api();
      const capture = { vmstate: layout.host("captureVmstate"), memory: layout.host("captureMemory") };
      const started = Date.now();
      await api.pauseVm();
      try {
        if (opts.kind === "memory") {
          mkdirSync(layout.host("captureDir"), { recursive: true });
          rmSync(capture.vmstate, { force: true });
          rmSync(capture.memory, { force: true });
          await api.createSnapshot({ snapshot_type: "Full", snapshot_path: layout.vm("captureVmstate"), mem_file_path: layout.vm("captureMemory") });
        }
        await copyRootfs(this.rec.rootfs, disk, log);
      } catch (err) {
        rmSync(capture.vmstate, { force: true });
        rmSync(capture.memory, { force: true });
        throw err;
      } finally {
        await api.resumeVm().catch((err: unknown) => {
          log.error({ err }, "cannot resume the microVM after its snapshot");
          throw err;
        });
      }
      log.debug({ kind: opts.kind, ms: Date.now() - started }, "microVM snapshotted (paused meanwhile)");
      if (opts.kind === "memory") {
        moveFile(capture.vmstate, join(dest, SNAPSHOT_VMSTATE));
        moveFile(capture.memory, join(dest, SNAPSHOT_MEMORY));
      }
    }
    writeSnapshotMeta(dest, { v: 1, kind: opts.kind, cpuCount: this.rec.cpuCount, memoryMB: this.rec.memoryMB, network: !!this.rec.tap });
  }

  /** New egress rules on the VM's tap (they outlive the tap's removal while paused: they match its name). */
  async updateEgress(policy: EgressPolicy | undefined): Promise<void> {
    if (!this.rec.tap) throw new Error("this microVM was created without a network (allowInternetAccess: false and no egress policy)");
    await applyPolicy(this.rec.tap.name, this.sandboxId, policy ?? { allow: [], deny: [] }, this.o.log);
  }

  /** SIGKILLs Firecracker and removes the VM's files (disk, snapshot, sockets, jail); keeps console.log. */
  async kill(): Promise<void> {
    if (this.killed) return;
    this.killed = true;
    this.deaths.stop();
    const { log, layout } = this.o;
    if (this.rec.pid > 0 && !(await stopVmm(this.rec.pid, this.rec.startTime))) {
      log.warn({ pid: this.rec.pid }, "firecracker did not exit after SIGKILL");
    }
    if (this.rec.tap) await releaseDevice(this.rec.tap.name, this.sandboxId);
    try {
      removeVmFiles(layout);
    } catch (err) {
      log.warn({ err }, "cannot remove the microVM's files");
    }
  }

  async alive(): Promise<boolean> {
    if (this.killed || this.deaths.dead) return false;
    if (this.busy) return true;
    if (this.rec.paused) return existsSync(this.rec.snapshot.vmstate) && existsSync(this.rec.snapshot.memory);
    return isRunning(this.rec.pid, this.rec.startTime);
  }

  private cpuNs(): number {
    return this.rec.paused ? 0 : (procStat(this.rec.pid)?.cpuNs ?? 0);
  }

  /** CPU and RSS of the Firecracker process (the guest's touched memory), configured vCPUs and memory, disk file. */
  async stats(): Promise<InstanceStats> {
    const st = this.rec.paused ? undefined : procStat(this.rec.pid);
    const cpuUsedPct = this.cpu.percent(st?.cpuNs ?? 0);
    const disk = diskUsage(this.rec.rootfs);
    return {
      cpuCount: this.rec.cpuCount,
      cpuUsedPct,
      memUsedBytes: st?.rssBytes ?? 0,
      memTotalBytes: this.rec.memoryMB * MiB,
      diskUsedBytes: disk.used,
      diskTotalBytes: disk.total,
    };
  }

  /** The Firecracker process's resident set (guest RAM it touched plus its own); 0 while paused. */
  hostMemoryBytes(): number {
    return this.rec.paused ? 0 : (procStat(this.rec.pid)?.rssBytes ?? 0);
  }

  detach(): void {
    this.deaths.stop();
  }

  onExit(listener: (reason: string) => void): void {
    this.deaths.onExit(listener);
  }

  /** The guest's serial console and Firecracker's messages, timestamped. */
  async logs(): Promise<{ timestamp: number; line: string }[]> {
    return consoleLines(this.o.layout.console, this.rec.bootedAt);
  }
}
