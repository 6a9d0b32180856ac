import { spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import { accelFor } from "../../host/accel.js";
import { spawnDetached } from "../../host/detached.js";
import { findExecutable } from "../../host/executables.js";
import { holdImage } from "../../images/image-refs.js";
import { findKernel, findTemplateImage, imagesDir, templateImageAt } from "../../images/layout.js";
import type { InstanceSpec, Runtime } from "../runtime.js";
import type { SnapshotSource } from "../../domain/snapshot.js";
import { copyImage } from "../process/disk-snapshot.js";
import { snapshotBacking, snapshotDiskPath } from "./disk-snapshot.js";
import { isRunning, procStat, waitFor } from "../process/procfs.js";
import { hostTscKHz, qemuArgs, vhostVsockArgs, vmLayout, type VmLayout } from "./command.js";
import { QemuInstance, type PersistedQemuInstance, type VmProcess } from "./instance.js";
import { tapForPolicy, tapUnsupported } from "./tap.js";
import { releaseDevice, releaseSandboxDevice } from "../net/nft.js";
import { Qmp } from "./qmp.js";
import { RuntimeUnavailableError, SnapshotUnusableError } from "../errors.js";
import { setting } from "../../settings.js";
import { sandboxIdRange } from "../process/id-map.js";
import { findVirtiofsd, guestVolumes, virtiofsdCommand, virtiofsQemuArgs, virtiofsSocket } from "./virtiofs.js";

export { RuntimeUnavailableError } from "../errors.js";


export interface QemuRuntimeOptions {
  /** Where kernels and templates are (default: imagesDir()). */
  imagesDir?: string;
  /** Force an accelerator (default: kvm when the host can run guests under it, else tcg). */
  accel?: "kvm" | "tcg";
  envdLogLevel?: string;
}

interface Tools {
  qemu: string;
  qemuImg: string;
  vhost: string;
  kernel: string;
  accel: "kvm" | "tcg";
  accelReason: string;
}

/**
 * Sandboxes as QEMU `-M microvm` guests: the template's rootfs.ext4 as a
 * copy-on-write qcow2 overlay on virtio-blk, the guest kernel booted
 * directly (PVH), vsock through one vhost-device-vsock per VM whose Unix
 * socket speaks the hybrid-vsock handshake, QMP for pause/resume/status.
 * KVM where the host has hardware virtualization, TCG elsewhere.
 */
export class QemuRuntime implements Runtime {
  readonly name = "qemu";
  private tools: Promise<Tools> | undefined;

  constructor(private readonly opts: QemuRuntimeOptions = {}) {}

  private images(): string {
    return this.opts.imagesDir ?? imagesDir();
  }

  /** Finds QEMU, qemu-img, vhost-device-vsock and the kernel; fails with what to install. */
  resolveTools(): Promise<Tools> {
    this.tools ??= (async () => {
      const missing: string[] = [];
      const qemu = findExecutable("qemu-system-x86_64", setting("LOCALE2B_QEMU"));
      const qemuImg = findExecutable("qemu-img", setting("LOCALE2B_QEMU_IMG"));
      const vhost = findExecutable("vhost-device-vsock", setting("LOCALE2B_VHOST_VSOCK"));
      const kernel = findKernel({ ...process.env, LOCALE2B_IMAGES_DIR: this.images() });
      if (!qemu) missing.push("qemu-system-x86_64 (package qemu-system-x86)");
      if (!qemuImg) missing.push("qemu-img (package qemu-utils)");
      if (!vhost) missing.push("vhost-device-vsock");
      if (missing.length) {
        throw new RuntimeUnavailableError(`the qemu runtime needs ${missing.join(", ")}: run scripts/setup-host (see docs/microvms.md)`);
      }
      if (!kernel) {
        throw new RuntimeUnavailableError(
          `no guest kernel in ${join(this.images(), "kernels")}: build it with scripts/build-kernel.sh (or set LOCALE2B_KERNEL)`,
        );
      }
      const detected = this.opts.accel ? { accel: this.opts.accel, reason: "forced" } : await accelFor();
      return { qemu: qemu!, qemuImg: qemuImg!, vhost: vhost!, kernel, accel: detected.accel, accelReason: detected.reason };
    })();
    this.tools.catch(() => (this.tools = undefined));
    return this.tools;
  }

  /** Egress lists: a tap device per such VM, filtered by nft (./tap.ts). */
  async egressUnsupported(): Promise<string | undefined> {
    return tapUnsupported();
  }

  /** Volumes are virtio-fs (./virtiofs.ts): they need virtiofsd and the sandboxes' id range. */
  async volumesUnsupported(): Promise<string | undefined> {
    if (!findVirtiofsd()) return "the qemu runtime serves volumes with virtiofsd, which is not installed (package qemu-system-common, or set LOCALE2B_VIRTIOFSD)";
    try {
      sandboxIdRange();
      return undefined;
    } catch (err) {
      return `volumes need the sandboxes' id range: ${(err as Error).message}`;
    }
  }

  async check(): Promise<string[]> {
    const t = await this.resolveTools();
    const notes = [`microVMs run under ${t.accel.toUpperCase()} (${t.accelReason}); kernel ${t.kernel}`];
    if (t.accel === "tcg") notes.push("under emulation each VM gets 1 vCPU (LOCALE2B_QEMU_TCG_CPUS to change) and boots in seconds, not milliseconds");
    if (!findTemplateImage("base", this.images())) notes.push("template 'base' is not built yet: run `locale2b template build base`");
    const noTap = tapUnsupported();
    if (noTap) notes.push(`VMs with internet access use QEMU's user-mode NAT (${noTap}): a guest can reach this host's loopback services at 10.0.2.2`);
    return notes;
  }

  /** A VM booting on a copy of a filesystem snapshot's overlay (its backing file is still the template build it was taken on). */
  async createFromSnapshot(spec: InstanceSpec, from: SnapshotSource): Promise<QemuInstance> {
    if (from.kind !== "filesystem") throw new SnapshotUnusableError(`the qemu runtime cannot start from a ${from.kind} snapshot`);
    const disk = snapshotDiskPath(from.dir);
    const { backing, problem } = snapshotBacking((await this.resolveTools()).qemuImg, disk);
    if (problem) throw new SnapshotUnusableError(problem);
    return this.create(spec, { disk, imageDir: backing && dirname(backing) });
  }

  async create(spec: InstanceSpec, from?: { disk: string; imageDir?: string }): Promise<QemuInstance> {
    const t = await this.resolveTools();
    const image = findTemplateImage(spec.templateId, this.images());
    if (!image) {
      throw new RuntimeUnavailableError(`template '${spec.templateId}' is not built on this host: run \`locale2b template build ${spec.templateId}\``);
    }
    const layout = vmLayout(spec.dir);
    mkdirSync(layout.dir, { recursive: true, mode: 0o700 });
    for (const p of [layout.vhostUser, layout.vsock, layout.qmp]) rmSync(p, { force: true });
    // The disk is an overlay on a build's rootfs.ext4: that build stays while the sandbox (or a pause or snapshot of it) does.
    const backingDir = from ? from.imageDir : image.dir;
    if (backingDir && templateImageAt(backingDir)) holdImage(backingDir, layout.dir, spec.log);
    if (from) await copyImage(from.disk, layout.disk);
    else {
      const img = spawnSync(t.qemuImg, ["create", "-q", "-f", "qcow2", "-F", "raw", "-b", image.rootfsImage, layout.disk], { encoding: "utf8" });
      if (img.status !== 0) throw new Error(`cannot create the sandbox's disk overlay: ${(img.stderr || img.error?.message || "").trim()}`);
    }
    // Emulated SMP is slower than one vCPU on small hosts (vm-notes: -smp 1 won on every measure).
    const tcgCpus = Number(setting("LOCALE2B_QEMU_TCG_CPUS")) || 1;
    const cpuCount = Math.max(1, t.accel === "tcg" ? Math.min(spec.cpuCount, tcgCpus) : spec.cpuCount);
    const memoryMB = Math.max(128, spec.memoryMB);
    const started: ChildProcess[] = [];
    let tapped: Awaited<ReturnType<typeof tapForPolicy>> | undefined;
    // The processes this start made, on disk as it goes: a server that dies before it records the
    // instance leaves them detached, and only this file names them (see adopt(); its tap the id names).
    const made: StartRecord = {};
    const note = (patch: StartRecord) => writeFileSync(startRecordPath(layout), JSON.stringify(Object.assign(made, patch)));
    try {
      // A tap behind the host's nft rules whenever the host can make one: QEMU's user-mode NAT would let
      // the guest reach the host's loopback services (10.0.2.2 is the host's 127.0.0.1 there).
      if (spec.egress || (spec.allowInternetAccess && !tapUnsupported())) {
        tapped = await tapForPolicy(spec.sandboxId, spec.egress ?? { allow: [], deny: [] }, spec.log);
      }
      const vhostChild = this.spawnDetached(t.vhost, vhostVsockArgs(layout), layout, spec.log);
      started.push(vhostChild);
      const vhost = await this.started(vhostChild, "vhost-device-vsock");
      note({ vhost });
      if (!(await waitFor(() => existsSync(layout.vhostUser), 5_000, 2))) {
        throw new Error(`vhost-device-vsock did not create ${layout.vhostUser} within 5 s (see ${layout.vmmLog})`);
      }
      const volumes = spec.volumes ?? [];
      const virtiofsd: VmProcess[] = [];
      for (const [i, v] of volumes.entries()) {
        const cmd = await virtiofsdCommand(this.images(), findVirtiofsd() ?? "virtiofsd", layout.dir, i, v.hostPath);
        rmSync(virtiofsSocket(layout.dir, i), { force: true });
        const child = this.spawnDetached(cmd.file, cmd.args, layout, spec.log);
        started.push(child);
        virtiofsd.push(await this.started(child, `virtiofsd (volume '${v.name}')`));
        note({ virtiofsd });
        if (!(await waitFor(() => existsSync(virtiofsSocket(layout.dir, i)) || child.exitCode !== null, 10_000, 5)) || child.exitCode !== null) {
          throw new Error(`virtiofsd for volume '${v.name}' did not start (see ${layout.vmmLog})`);
        }
      }
      const args = qemuArgs({
        sandboxId: spec.sandboxId,
        kernel: t.kernel,
        layout,
        cpuCount,
        memoryMB,
        accel: t.accel,
        tscKHz: hostTscKHz(),
        envdLogLevel: this.opts.envdLogLevel ?? setting("LOCALE2B_ENVD_LOG_LEVEL"),
        network: tapped?.network ?? spec.allowInternetAccess,
        extraArgs: virtiofsQemuArgs(layout.dir, volumes.length),
      });
      const qemuChild = this.spawnDetached(t.qemu, args, layout, spec.log);
      started.push(qemuChild);
      const qemu = await this.started(qemuChild, "QEMU");
      note({ qemu });
      // A busy host can take QEMU well over 10 s to open its socket (a clean-clone CI run failed so): wait
      // as long as it runs, up to a minute, and give up at once if it exits.
      const qmpAlive = () => qemuChild.exitCode === null && qemuChild.signalCode === null;
      const qmp = await Qmp.connect(layout.qmp, 60_000, qmpAlive).catch((err: Error) => {
        throw new Error(`${err.message} (QEMU's output is in ${layout.vmmLog})`);
      });
      spec.log.debug({ qemu: qemu.pid, vhost: vhost.pid, accel: t.accel }, "microVM started");
      return new QemuInstance({
        sandboxId: spec.sandboxId,
        layout,
        qemu,
        vhost,
        qmp,
        cpuCount,
        memoryMB,
        accel: t.accel,
        log: spec.log,
        children: { qemu: qemuChild, vhost: vhostChild },
        tap: tapped?.tap,
        virtiofsd,
        guestVolumes: guestVolumes(volumes),
      });
    } catch (err) {
      for (const c of started) c.kill("SIGKILL");
      if (tapped) await releaseDevice(tapped.tap.name, spec.sandboxId);
      throw err;
    }
  }

  async adopt(sandboxId: string, dir: string, persisted: Record<string, unknown>, log: Logger): Promise<QemuInstance | undefined> {
    const p = persisted as Partial<PersistedQemuInstance>;
    const layout = vmLayout(dir);
    if (!p.qemu || !p.vhost) {
      // No record of a VM: a create the server died in (or nothing started). Stop what it had started.
      await stopCutShort(sandboxId, layout, log);
      return undefined;
    }
    const virtiofsd = Array.isArray(p.virtiofsd) ? p.virtiofsd : [];
    const alive = [p.qemu, p.vhost, ...virtiofsd].every((proc) => isRunning(proc.pid, proc.startTime));
    if (!alive) {
      for (const proc of [p.qemu, p.vhost, ...virtiofsd]) {
        if (isRunning(proc.pid, proc.startTime)) process.kill(proc.pid, "SIGKILL");
      }
      if (p.tap) await releaseDevice(p.tap.name, sandboxId);
      return undefined;
    }
    const qmp = await Qmp.connect(layout.qmp, 5_000);
    const inst = new QemuInstance({
      sandboxId,
      layout,
      qemu: p.qemu,
      vhost: p.vhost,
      qmp,
      cpuCount: Number(p.cpuCount) || 1,
      memoryMB: Number(p.memoryMB) || 512,
      accel: p.accel === "kvm" ? "kvm" : "tcg",
      log,
      tap: p.tap,
      virtiofsd,
      ...(Array.isArray(p.guestVolumes) ? { guestVolumes: p.guestVolumes } : {}),
    });
    inst.bootMs = p.bootMs;
    return inst;
  }

  private spawnDetached(file: string, args: string[], layout: VmLayout, log: Logger): ChildProcess {
    return spawnDetached(file, args, { logPath: layout.vmmLog, cwd: layout.dir, log });
  }


  private async started(child: ChildProcess, what: string): Promise<VmProcess> {
    const pid = child.pid;
    if (!pid) throw new Error(`${what} could not be started`);
    let st = procStat(pid);
    // The start time is what tells our process apart from a recycled pid after a restart.
    for (let i = 0; i < 50 && !st; i++) {
      await new Promise((r) => setTimeout(r, 2));
      st = procStat(pid);
    }
    if (!st) throw new Error(`${what} exited at once`);
    return { pid, startTime: st.startTime };
  }
}

/** The processes create() had started so far, in `<dir>/started.json`. */
interface StartRecord {
  vhost?: VmProcess;
  qemu?: VmProcess;
  virtiofsd?: VmProcess[];
}

function startRecordPath(layout: VmLayout): string {
  return join(layout.dir, "started.json");
}

/**
 * Kills the processes a create cut short had started (each only if it is
 * still the same process: pid and start time) and releases its tap.
 */
async function stopCutShort(sandboxId: string, layout: VmLayout, log: Logger): Promise<void> {
  let rec: StartRecord = {};
  try {
    rec = JSON.parse(readFileSync(startRecordPath(layout), "utf8")) as StartRecord;
  } catch {
    // nothing recorded yet (the server died before): at most a tap, which the id names
  }
  for (const [what, proc] of [["QEMU", rec.qemu], ["vhost-device-vsock", rec.vhost], ...(rec.virtiofsd ?? []).map((v) => ["virtiofsd", v] as const)] as const) {
    if (proc && Number.isInteger(proc.pid) && proc.pid > 1 && isRunning(proc.pid, proc.startTime)) {
      process.kill(proc.pid, "SIGKILL");
      log.info({ pid: proc.pid }, `stopped the ${what} of a create cut short by a restart`);
    }
  }
  await releaseSandboxDevice(sandboxId);
}
