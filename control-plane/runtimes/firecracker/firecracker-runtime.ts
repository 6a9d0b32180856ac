import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { findKernel, findTemplateImage, GUEST, imagesDir } from "../../images/layout.js";
import { cmdline, isRunning } from "../process/procfs.js";
import type { InstanceSpec, Runtime } from "../runtime.js";
import type { SnapshotSource } from "../../domain/snapshot.js";
import { FirecrackerApi } from "./api-client.js";
import { copyRootfs, growRootfs } from "./disk.js";
import { findFirecracker, findJailer, probeKvm, SETUP_HINT } from "./host.js";
import { FirecrackerInstance } from "./instance.js";
import { jailRequested, jailSpec, prepareJail } from "./jail.js";
import { checkSocketPath, removeVmFiles, vmLayout, type JailSpec, type VmLayout } from "./layout.js";
import { ipBootArg, vmNetwork } from "./network.js";
import { missingTools, releaseDevice, releaseSandboxDevice } from "../net/nft.js";
import { restoreVm } from "./restore.js";
import { readSnapshotMeta, SNAPSHOT_DISK } from "./snapshots.js";
import { latestRecord, writeStateFile, type PersistedFirecracker, type TapRecord } from "./state.js";
import { firecrackerLaunch, jailerLaunch, spawnVmm, stopVmm, waitForSocket, type Launch, type VmmProcess } from "./vmm-process.js";

const MiB = 1024 * 1024;
/** The guest's vsock context id (any >= 3; each VM has its own vsock device). */
const GUEST_CID = 3;

export interface FirecrackerRuntimeOptions {
  /** Where binaries and settings are looked up (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** The image cache (default: $LOCALE2B_IMAGES_DIR, else <data dir>/images). */
  imagesDir?: string;
  /** The guest kernel (default: findKernel()). */
  kernel?: string;
  /** Templates check() looks for (default ["base"]). */
  templates?: string[];
  /** Per API call time limit (default 10 s; snapshot calls get longer). */
  apiTimeoutMs?: number;
  /** Start Firecracker through the jailer (default: LOCALE2B_FIRECRACKER_JAILER=1). */
  jailer?: boolean;
  /**
   * The environment Firecracker runs with, read at each start (default: PATH
   * only). Tests pass process.env so the mock Firecracker sees its settings.
   */
  vmmEnv?: NodeJS.ProcessEnv;
}

/** The kernel command line: serial console, root on the first virtio disk, our init. */
export function bootArgs(sandboxId: string, now: number, tap?: TapRecord): string {
  const args = [
    "console=ttyS0",
    "reboot=k",
    "panic=1",
    "pci=off",
    "root=/dev/vda",
    "rw",
    `init=${GUEST.init}`,
    `l2b.hostname=${sandboxId}`,
    `l2b.epoch=${Math.floor(now / 1000)}`,
  ];
  if (tap) args.push(ipBootArg(tap.index));
  return args.join(" ");
}

/**
 * Sandboxes as Firecracker microVMs: the template's rootfs.ext4 (copy-on-write
 * copy) and the guest kernel, configured over Firecracker's API socket, envd
 * reached through Firecracker's hybrid-vsock socket. Pause writes a full
 * snapshot and stops the VMM; resume loads it into a new one. See README.md.
 */
export class FirecrackerRuntime implements Runtime {
  readonly name = "firecracker";

  constructor(private readonly opts: FirecrackerRuntimeOptions = {}) {}

  private get env(): NodeJS.ProcessEnv {
    return this.opts.env ?? process.env;
  }

  private get images(): string {
    return this.opts.imagesDir ?? imagesDir(this.env);
  }

  private get useJailer(): boolean {
    return this.opts.jailer ?? jailRequested(this.env);
  }

  /** Egress lists are nft rules on the VM's tap device (../net/nft.ts). */
  async egressUnsupported(): Promise<string | undefined> {
    return missingTools(["nft", "ip"]);
  }

  /** Firecracker has no virtio-fs: a volume shared between VMs and the host would need a network file system in the guest. */
  async volumesUnsupported(): Promise<string | undefined> {
    return "the firecracker runtime does not mount volumes (it has no virtio-fs; shared volumes would need a network file system in the guest): use the process runtime";
  }

  async check(): Promise<string[]> {
    const notes: string[] = [];
    const fc = findFirecracker(this.env);
    if ("missing" in fc) notes.push(fc.missing);
    if (this.useJailer && !findJailer(this.env)) {
      notes.push(`LOCALE2B_FIRECRACKER_JAILER=1 but no 'jailer' on PATH (or LOCALE2B_JAILER) (${SETUP_HINT})`);
    }
    const kvm = await probeKvm();
    if (!kvm.ok) notes.push(`no hardware KVM: ${kvm.reason}`);
    if (!(this.opts.kernel ?? findKernel(this.env, this.images))) {
      notes.push(`no guest kernel: set LOCALE2B_KERNEL or build one into ${join(this.images, "kernels")} (${SETUP_HINT})`);
    }
    for (const t of this.opts.templates ?? ["base"]) {
      if (!findTemplateImage(t, this.images)) notes.push(`template '${t}' has no image in ${join(this.images, "templates")}: build it first (${SETUP_HINT})`);
    }
    return notes;
  }

  /** The firecracker binary, or a clear error. */
  private binary(): string {
    const fc = findFirecracker(this.env);
    if ("missing" in fc) throw new Error(fc.missing);
    return fc.path;
  }

  /** The guest kernel, or a clear error. */
  private kernel(): string {
    const kernel = this.opts.kernel ?? findKernel(this.env, this.images);
    if (!kernel) throw new Error(`no guest kernel found: set LOCALE2B_KERNEL or build one into ${join(this.images, "kernels")} (${SETUP_HINT})`);
    return kernel;
  }

  private launcher(sandboxId: string, layout: VmLayout, jail: JailSpec | undefined): () => Launch {
    return () => {
      const env = this.opts.vmmEnv ? { ...this.opts.vmmEnv } : undefined;
      if (!jail) return { ...firecrackerLaunch(this.binary(), layout.vm("apiSock"), sandboxId), env };
      const jailer = findJailer(this.env);
      if (!jailer) throw new Error(`jailer not found: put 'jailer' on PATH or set LOCALE2B_JAILER (${SETUP_HINT})`);
      return { ...jailerLaunch(jailer, jail, layout.vm("apiSock"), sandboxId), env };
    };
  }

  async create(spec: InstanceSpec): Promise<FirecrackerInstance> {
    this.binary();
    this.kernel();
    const image = findTemplateImage(spec.templateId, this.images);
    if (!image || !existsSync(image.rootfsImage)) {
      throw new Error(`template '${spec.templateId}' has no rootfs.ext4 in ${join(this.images, "templates")}: build the template first (${SETUP_HINT})`);
    }
    return this.boot(spec, image.rootfsImage);
  }

  /**
   * A sandbox from a snapshot one of this runtime's VMs took (snapshots.ts):
   * filesystem-only, a fresh boot on a copy of its disk; memory, the VM
   * restored from it (restore.ts), its processes running on.
   */
  async createFromSnapshot(spec: InstanceSpec, from: SnapshotSource): Promise<FirecrackerInstance> {
    const meta = readSnapshotMeta(from.dir, from.kind);
    if (from.kind === "filesystem") return this.boot(spec, join(from.dir, SNAPSHOT_DISK));
    const { jail, layout, launch } = this.vmFor(spec);
    return restoreVm({ spec, from: from.dir, meta, layout, launch, jail, kernel: this.opts.kernel ?? findKernel(this.env, this.images), apiTimeoutMs: this.opts.apiTimeoutMs });
  }

  /** Where a new VM's files go (in a jail or not) and how its Firecracker starts; fails now, not after a disk copy, when the jailer is missing. */
  private vmFor(spec: InstanceSpec): { jail: JailSpec | undefined; layout: VmLayout; launch: () => Launch } {
    const jail = this.useJailer ? jailSpec(this.binary(), this.env) : undefined;
    const layout = vmLayout(spec.dir, spec.sandboxId, jail);
    const launch = this.launcher(spec.sandboxId, layout, jail);
    launch();
    return { jail, layout, launch };
  }

  /** A fresh boot of the guest kernel on a copy of `disk` (the template's image, or a filesystem snapshot's). */
  private async boot(spec: InstanceSpec, disk: string): Promise<FirecrackerInstance> {
    const { sandboxId, log } = spec;
    const kernel = this.kernel();
    const { jail, layout, launch } = this.vmFor(spec);
    checkSocketPath(layout.host("apiSock"));
    checkSocketPath(layout.host("vsock"));

    const rootfs = layout.host("rootfs");
    let tap: TapRecord | undefined;
    let vmm: VmmProcess | undefined;
    try {
      mkdirSync(spec.dir, { recursive: true });
      mkdirSync(layout.root, { recursive: true });
      await copyRootfs(disk, rootfs, log);
      await growRootfs(rootfs, spec.diskSizeMB * MiB, log);
      const kernelPath = jail ? prepareJail(layout, jail, kernel) : kernel;
      if (spec.allowInternetAccess || spec.egress) tap = await vmNetwork(spec, jail?.uid);
      rmSync(layout.host("apiSock"), { force: true });
      rmSync(layout.host("vsock"), { force: true });

      vmm = spawnVmm(launch(), layout.console, layout.root, log);
      const cpuCount = Math.min(32, Math.max(1, Math.floor(spec.cpuCount) || 1));
      const memoryMB = Math.max(1, Math.floor(spec.memoryMB));
      const record: PersistedFirecracker = {
        v: 1,
        sandboxId,
        pid: vmm.pid,
        startTime: vmm.startTime,
        apiSock: layout.host("apiSock"),
        vsock: layout.host("vsock"),
        rootfs,
        snapshot: { vmstate: layout.host("vmstate"), memory: layout.host("memory") },
        paused: false,
        cpuCount,
        memoryMB,
        bootedAt: 0,
        tap,
        jail,
        updatedAt: Date.now(),
      };
      // Recorded before the VM is configured: a control plane restarted meanwhile finds the process.
      writeStateFile(layout.stateFile, record);
      await waitForSocket(layout.host("apiSock"), vmm, layout.console, "its API socket");
      const api = new FirecrackerApi(layout.host("apiSock"), { timeoutMs: this.opts.apiTimeoutMs });
      await api.putMachineConfig({ vcpu_count: cpuCount, mem_size_mib: memoryMB, smt: false });
      const now = Date.now();
      await api.putBootSource({ kernel_image_path: kernelPath, boot_args: bootArgs(sandboxId, now, tap) });
      await api.putDrive({ drive_id: "rootfs", path_on_host: layout.vm("rootfs"), is_root_device: true, is_read_only: false });
      await api.putVsock({ guest_cid: GUEST_CID, uds_path: layout.vm("vsock") });
      if (tap) await api.putNetworkInterface({ iface_id: "eth0", host_dev_name: tap.name, guest_mac: tap.guestMac });
      record.bootedAt = Date.now();
      await api.instanceStart();
      await waitForSocket(layout.host("vsock"), vmm, layout.console, "the vsock socket", 5_000, false);
      log.debug({ pid: vmm.pid, ms: Date.now() - now, network: !!tap, jailed: !!jail }, "microVM started");
      return new FirecrackerInstance({ record, layout, launch, apiTimeoutMs: this.opts.apiTimeoutMs, log, child: vmm.child });
    } catch (err) {
      // Leave nothing behind: no process, no tap, no disk copy.
      if (vmm) await stopVmm(vmm.pid, vmm.startTime);
      if (tap) await releaseDevice(tap.name, sandboxId);
      removeVmFiles(layout);
      throw err;
    }
  }

  async adopt(sandboxId: string, dir: string, persisted: Record<string, unknown>, log: Logger): Promise<FirecrackerInstance | undefined> {
    const rec = latestRecord(persisted, join(dir, "firecracker.json"), sandboxId);
    if (!rec) {
      // No record of a VMM: a start the server died in before spawning it, which may have made the tap.
      await releaseSandboxDevice(sandboxId);
      return undefined;
    }
    const layout = vmLayout(dir, sandboxId, rec.jail);
    const launch = this.launcher(sandboxId, layout, rec.jail);
    const init = { layout, launch, apiTimeoutMs: this.opts.apiTimeoutMs, log };
    // A process is ours only if alive, the same one (start time) and serving this sandbox's API socket.
    const args = rec.pid > 0 && isRunning(rec.pid, rec.startTime) ? cmdline(rec.pid) : [];
    if (args.includes(layout.vm("apiSock")) && args.includes(sandboxId)) {
      const info = await new FirecrackerApi(rec.apiSock, { timeoutMs: 2_000 }).describeInstance().catch((err: Error) => {
        log.warn({ err: err.message }, "the adopted microVM's API does not answer");
        return undefined;
      });
      // Paused with a process: a restart caught a pause after its snapshot (the VM is Paused: adopt it,
      // the manager pauses again) or a resume before its load (Not started: the snapshot is the truth).
      if (!rec.paused || info?.state === "Running" || info?.state === "Paused") {
        log.debug({ pid: rec.pid, state: info?.state }, "microVM re-adopted");
        return new FirecrackerInstance({ ...init, record: { ...rec, paused: false } });
      }
      await stopVmm(rec.pid, rec.startTime);
    }
    const complete = [rec.snapshot.vmstate, rec.snapshot.memory, rec.rootfs].every((p) => existsSync(p));
    if (rec.paused && complete) {
      // Nothing runs while paused: the snapshot and the disk are the sandbox.
      for (const f of ["apiSock", "vsock"] as const) rmSync(layout.host(f), { force: true });
      return new FirecrackerInstance({ ...init, record: { ...rec, pid: 0, startTime: 0 } });
    }
    if (rec.tap) await releaseDevice(rec.tap.name, sandboxId);
    return undefined;
  }
}
