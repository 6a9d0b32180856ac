import { existsSync, rmSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { basename } from "node:path";
import type { Logger } from "pino";
import type { InstanceSpec, Runtime } from "../runtime.js";
import type { SnapshotSource } from "../../domain/snapshot.js";
import { RuntimeUnavailableError, SnapshotUnusableError } from "../errors.js";
import { holdImage, sandboxImage } from "../../images/image-refs.js";
import { findTemplateImage, imagesDir, type GuestImage } from "../../images/layout.js";
import { groupRecordOf, openCgroup } from "../process/cgroup-detect.js";
import { isRunning, procStat } from "../process/procfs.js";
import { nameServers } from "../net/dns.js";
import { releaseDevice, releaseSandboxDevice } from "../net/nft.js";
import { createNetns, deleteNetns, netnsName } from "../net/netns.js";
import { attachVeth, isNetRecord, updateVethPolicy, vethUnsupported, type NetRecord } from "../net/veth.js";
import type { EgressPolicy } from "../../domain/network.js";
import { GUEST_PIDS_MAX, ociSpec } from "./bundle.js";
import { effectivePolicy, GvisorInstance, type PersistedGvisorInstance } from "./instance.js";
import { tailLines } from "../../host/log-tail.js";
import { WarmImages, warmKey } from "./warm-image.js";
import { gvisorLayout, mountRoot, quiescedAck, removeSandboxDir, snapshotCheckpoint, snapshotDisk } from "./rootfs.js";
import { findRunsc, oldRunscNote, Runsc, RUNSC_INSTALL, runscFeatures, runscVersion } from "./runsc.js";
import { setting } from "../../settings.js";
import { sandboxIdRange } from "../process/id-map.js";
import { bindVolumes, bundleVolumes, unbindVolumes } from "./volume-binds.js";

export interface GvisorRuntimeOptions {
  /** Where built templates are (default imagesDir()). */
  imagesDir?: string;
  /** pids.max per sandbox (default 1024). */
  pidsMax?: number;
  envdLogLevel?: string;
}

/** The cgroup folder (under the control plane's own group) runsc makes sandbox groups in. */
const CGROUP_FOLDER = "locale2b-gvisor";

/**
 * gVisor: each sandbox is a runsc sandbox (a user-space kernel between its
 * code and the host's) on its template's root filesystem with its own
 * writable disk, `locale2b-init` as PID 1 serving envd over
 * `<dir>/host/envd.sock` (the same hybrid-vsock transport as every runtime),
 * cgroup limits, and its own network (a veth in a named namespace, filtered by
 * the shared nft rules). Needs root. README.md in this folder.
 */
export class GvisorRuntime implements Runtime {
  readonly name = "gvisor";
  private bin: string | undefined;

  private readonly warm: WarmImages;

  constructor(private readonly opts: GvisorRuntimeOptions = {}) {
    this.warm = new WarmImages((spec) => this.start(spec, this.image(spec)));
  }

  private runscBin(): string {
    this.bin ??= findRunsc();
    if (!this.bin) throw new RuntimeUnavailableError(`runsc is not installed: ${RUNSC_INSTALL}`);
    return this.bin;
  }

  async check(): Promise<string[]> {
    const bin = this.runscBin();
    if (process.getuid?.() !== 0) throw new RuntimeUnavailableError("the gvisor runtime needs the server to run as root (runsc sets up namespaces, cgroups and mounts)");
    const v = await runscVersion(bin).catch((err: Error) => {
      throw new RuntimeUnavailableError(`${bin} does not run: ${err.message}; ${RUNSC_INSTALL}`);
    });
    const notes = [`gVisor sandboxes: runsc ${v.version} (${bin}), platform ${v.platform}`];
    const old = oldRunscNote(v.version);
    if (old) notes.push(old);
    void runscFeatures(bin); // known before the first restore or checkpoint asks
    const noVeth = vethUnsupported();
    if (noVeth) notes.push(`sandboxes have loopback only and no egress rules (${noVeth})`);
    if (!findTemplateImage("base", this.images())) notes.push("template 'base' is not built yet: run `locale2b template build base`");
    return notes;
  }

  /** The server stops: a warm-start image being built is finished (its builder sandbox removed). */
  async close(): Promise<void> {
    await this.warm.settle();
  }

  async egressUnsupported(): Promise<string | undefined> {
    return vethUnsupported();
  }

  /**
   * Volumes are id-mapped binds in the OCI bundle (volume-binds.ts): they need
   * the process runtime's id range (a volume's files belong to its ids).
   */
  async volumesUnsupported(): Promise<string | undefined> {
    try {
      sandboxIdRange();
      return undefined;
    } catch (err) {
      return `volumes need the sandboxes' id range: ${(err as Error).message}`;
    }
  }

  private images(): string {
    return this.opts.imagesDir ?? imagesDir();
  }

  /** The build a sandbox runs on (a snapshot's own while it is there), or a clear error. */
  private image(spec: InstanceSpec, fromDir?: string): GuestImage {
    const image = sandboxImage(spec.templateId, this.images(), fromDir);
    if (!image) throw new RuntimeUnavailableError(`template '${spec.templateId}' is not built on this host: run \`locale2b template build ${spec.templateId}\``);
    return image;
  }

  private logLevel(): string {
    return this.opts.envdLogLevel ?? setting("LOCALE2B_ENVD_LOG_LEVEL") ?? "info";
  }

  /**
   * A sandbox on a snapshot's copy: `filesystem`, a fresh start on its disk;
   * `memory`, runsc restore of its checkpoint image on its disk, so its
   * processes go on (the new sandbox's own id, hostname, network, token).
   */
  async createFromSnapshot(spec: InstanceSpec, from: SnapshotSource): Promise<GvisorInstance> {
    const disk = snapshotDisk(from.dir);
    if (!existsSync(disk)) throw new SnapshotUnusableError(`the snapshot's disk image is missing (${disk})`);
    const checkpoint = from.kind === "memory" ? snapshotCheckpoint(from.dir) : undefined;
    // Its checkpoint was taken without volumes (snapshotKinds): runsc restores only into the mounts it was saved with.
    if (checkpoint && spec.volumes?.length) throw new SnapshotUnusableError("a sandbox from a memory snapshot cannot mount volumes on gvisor (its checkpoint has no such mounts): mount them in a sandbox from a template, or from a filesystem snapshot");
    if (checkpoint && !existsSync(checkpoint)) throw new SnapshotUnusableError(`the snapshot's checkpoint image is missing (${checkpoint})`);
    return this.start(spec, this.image(spec, from.dir), { disk, checkpoint });
  }

  /**
   * A new sandbox: restored from the warm-start image of its template and
   * shape when one is built (warm-image.ts), else booted; the first cold
   * start of a shape builds that image in the background.
   */
  async create(spec: InstanceSpec): Promise<GvisorInstance> {
    const image = this.image(spec);
    // A warm-start image was checkpointed without volumes: a restore needs the bundle's mounts it was saved with.
    if (setting("LOCALE2B_GVISOR_WARM_START") === "0" || spec.volumes?.length) return this.start(spec, image);
    const root = WarmImages.root(spec.dir);
    const key = warmKey(spec, basename(image.dir));
    const warm = this.warm.ready(root, key);
    if (!warm) {
      this.warm.ensure(root, key, spec);
      return this.start(spec, image);
    }
    try {
      const inst = await this.start(spec, image, warm);
      inst.warmedUp = spec.warmUp !== undefined;
      return inst;
    } catch (err) {
      spec.log.warn({ err }, "restoring the warm-start image failed: starting cold (the image is built again)");
      this.warm.discard(root, key);
      return this.start(spec, image);
    }
  }

  /** Starts a sandbox on `image` (its rootfs the overlay's lower layer): fresh, or on a snapshot's disk (and checkpoint). */
  private async start(spec: InstanceSpec, image: GuestImage, from?: { disk: string; checkpoint?: string }): Promise<GvisorInstance> {
    const bin = this.runscBin();
    const noVeth = vethUnsupported();
    if (spec.egress && noVeth) throw new Error(`egress allow/deny lists cannot be enforced on this host: ${noVeth}`);
    const layout = gvisorLayout(spec.dir);
    const runsc = new Runsc(bin, layout.runscRoot, spec.sandboxId);
    const cpuCount = spec.cpuCount > 0 ? spec.cpuCount : cpus().length;
    // Every sandbox gets a veth where the host allows, even without internet access (then its rules
    // drop everything): its network can be opened later by updateNetwork, which runsc cannot add.
    const netns = noVeth ? undefined : netnsName(spec.sandboxId);
    const volumes = (spec.volumes ?? []).map((v) => ({ hostPath: v.hostPath, path: v.path }));
    let net: NetRecord | undefined;
    let started = false;
    try {
      // Its root is a layer over the build's files: that build stays while the sandbox (or a pause or snapshot of it) does.
      holdImage(image.dir, layout.dir, spec.log);
      await mountRoot(layout, image.rootfsDir, spec.diskSizeMB, { hostname: spec.sandboxId, dns: netns ? nameServers() : [] }, from?.disk);
      if (netns) {
        await createNetns(netns);
        net = await attachVeth(spec.sandboxId, { name: netns }, effectivePolicy(spec.egress, spec.allowInternetAccess), spec.log);
      }
      const pidsMax = this.opts.pidsMax ?? 1024;
      const config = ociSpec({
        sandboxId: spec.sandboxId,
        rootfs: layout.rootfs,
        hostDir: layout.hostDir,
        netnsPath: netns && `/run/netns/${netns}`,
        memoryMB: spec.memoryMB,
        cpuCount,
        pidsMax,
        envdLogLevel: this.logLevel(),
        cgroupsPath: `${CGROUP_FOLDER}/${spec.sandboxId}`,
        volumes: bundleVolumes(layout.dir, volumes),
      });
      writeFileSync(layout.config, JSON.stringify(config, null, 2));
      rmSync(layout.socket, { force: true });
      rmSync(layout.dialSocket, { force: true });
      started = true;
      // A checkpoint is taken with the init's ack file in the shared host directory; the restored
      // sandbox's kernel remembers it, and finding it missing breaks that mount (EIO): put it back.
      if (from?.checkpoint) writeFileSync(quiescedAck(layout), "", { flag: "wx" });
      const how = { bundle: layout.bundle, network: netns ? ("sandbox" as const) : ("none" as const), logFile: layout.log };
      await bindVolumes(this.images(), layout.dir, volumes);
      try {
        if (from?.checkpoint) await runsc.restore({ ...how, imagePath: from.checkpoint });
        else await runsc.run(how);
      } finally {
        await unbindVolumes(layout.dir);
      }
      const state = await runsc.startedPid();
      if (!state || !isRunning(state.pid)) throw new Error(`the sandbox stopped right after it started (${state?.status ?? "unknown to runsc"})`);
      // A restored sandbox's kernel has its limit from the checkpoint; a booted one gets it now (the host's is looser: bundle.ts).
      if (!from?.checkpoint) await runsc.writeInside(GUEST_PIDS_MAX, String(pidsMax)).catch((err: unknown) => spec.log.warn({ err }, "cannot set the sandbox's pids limit inside: a fork bomb may stop it"));
      const cgroup = openCgroup(groupRecordOf(state.pid, spec.sandboxId), spec.sandboxId);
      if (!cgroup) spec.log.warn("cannot find the sandbox's cgroup: stats and out-of-memory reports are missing");
      spec.log.debug({ pid: state.pid, netns, device: net?.device }, "gVisor sandbox started");
      const inst = new GvisorInstance({
        sandboxId: spec.sandboxId,
        layout,
        runsc,
        pid: state.pid,
        startTime: procStat(state.pid)?.startTime ?? 0,
        cgroup,
        cpuCount,
        memoryMB: spec.memoryMB,
        allowInternetAccess: spec.allowInternetAccess,
        netns,
        net,
        policy: spec.egress,
        restored: !!from?.checkpoint,
        volumes,
        imagesDir: this.images(),
        log: spec.log,
      });
      if (from?.checkpoint) {
        await inst.restoredAs(spec.sandboxId).catch((err: unknown) => {
          inst.detach();
          throw err;
        });
      }
      return inst;
    } catch (err) {
      const tail = started ? tailLines(layout.log, 3).join(" | ") : "";
      if (started) await runsc.destroy();
      if (net) await releaseDevice(net.device, spec.sandboxId);
      if (netns) await deleteNetns(netns);
      await removeSandboxDir(layout).catch(() => undefined);
      throw new Error(`cannot start the gVisor sandbox: ${(err as Error).message}${tail ? ` (log: ${tail})` : ""}`);
    }
  }

  async adopt(sandboxId: string, dir: string, persisted: Record<string, unknown>, log: Logger): Promise<GvisorInstance | undefined> {
    const p = persisted as Partial<PersistedGvisorInstance>;
    const layout = gvisorLayout(dir);
    const bin = findRunsc();
    const runsc = bin ? new Runsc(bin, layout.runscRoot, sandboxId) : undefined;
    const pid = Number(p.pid);
    const startTime = typeof p.startTime === "number" ? p.startTime : undefined;
    const net = isNetRecord(p.net) ? p.net : undefined;
    const netns = typeof p.netns === "string" && p.netns === netnsName(sandboxId) ? p.netns : undefined;
    // Paused to disk: no sentry runs; the sandbox is its checkpoint image.
    const checkpointed = p.checkpointed === true && existsSync(layout.checkpoint);
    const state = runsc && !checkpointed && isRunning(pid, startTime) ? await runsc.state() : undefined;
    const ours = checkpointed || (state !== undefined && state.pid === pid && (state.status === "running" || state.status === "paused"));
    if (!ours || !runsc) {
      // Died while we were down (or runsc is gone): release what is left of it.
      if (runsc) await runsc.destroy();
      // A create the server died in has no record of its network yet: its names follow from the id.
      await (net ? releaseDevice(net.device, sandboxId) : releaseSandboxDevice(sandboxId));
      await deleteNetns(netns ?? netnsName(sandboxId));
      await removeSandboxDir(layout).catch((err: unknown) => log.warn({ err }, "cannot remove a dead sandbox's files"));
      return undefined;
    }
    // A server that died while runsc started it left the volumes' id-mapped binds on the host: the sandbox has its own.
    await unbindVolumes(layout.dir).catch((err: unknown) => log.warn({ err }, "cannot unmount a volume's leftover id-mapped bind"));
    const policy = isPolicy(p.policy) ? p.policy : undefined;
    const allowInternetAccess = p.allowInternetAccess !== false;
    // The host's rules may be from another server version (rewritten at first use): put the sandbox's back.
    if (net) await updateVethPolicy(net, sandboxId, effectivePolicy(policy, allowInternetAccess), log).catch((err: unknown) => log.warn({ err }, "cannot restore the sandbox's network rules"));
    const adopted = new GvisorInstance({
      sandboxId,
      layout,
      runsc,
      pid,
      startTime: startTime ?? procStat(pid)?.startTime ?? 0,
      cgroup: checkpointed ? undefined : openCgroup(p.cgroup, sandboxId),
      cpuCount: Number(p.cpuCount) || 1,
      memoryMB: Number(p.memoryMB) || 512,
      allowInternetAccess,
      netns,
      net,
      policy,
      checkpointed,
      restored: p.restored === true,
      volumes: Array.isArray(p.volumes) ? p.volumes.filter((v) => typeof v?.hostPath === "string" && typeof v.path === "string") : [],
      imagesDir: this.images(),
      log,
    });
    if (!checkpointed) adopted.vsockReady(); // a sandbox started before its socket was moved out of reach: move it now
    return adopted;
  }
}


function isPolicy(v: unknown): v is EgressPolicy {
  const p = v as Partial<EgressPolicy> | undefined;
  return Array.isArray(p?.allow) && Array.isArray(p.deny);
}

