import { spawn } from "node:child_process";
import { closeSync, mkdirSync, chmodSync, openSync, rmSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import type { InstanceSpec, Runtime } from "../runtime.js";
import type { SnapshotSource } from "../../domain/snapshot.js";
import { copyImage, snapshotDiskPath } from "./disk-snapshot.js";
import { holdImage, sandboxImage } from "../../images/image-refs.js";
import { GUEST, imagesDir } from "../../images/layout.js";
import { cliEntry } from "../paths.js";
import { offerSpawnHelper } from "../../host/commands.js";
import { probeHost, runtimePaths, type HostCapabilities } from "./capabilities.js";
import { openCgroup } from "./cgroup-detect.js";
import type { CgroupLimits, SandboxCgroup } from "./cgroups.js";
import { sandboxIdRange, type IdRange } from "./id-map.js";
import { ProcessInstance, type PersistedProcessInstance } from "./instance.js";
import { isLauncherOf, launchSandbox } from "./launcher.js";
import { buildLaunch, pathsToKeep, type IsolationMode } from "./namespaces.js";
import { cmdline, isRunning, procStat } from "./procfs.js";
import { createDisk, shiftedRootfs } from "./sandbox-root.js";
import { mountVolumes } from "./volume-mounts.js";
import { prepareSandboxFs, SANDBOX_HOME, SANDBOX_USER, sandboxLayout, userFiles } from "./sandbox-fs.js";
import { nameServers } from "../net/dns.js";
import { releaseDevice } from "../net/nft.js";
import { attachVeth, isNetRecord, updateVethPolicy, type NetRecord } from "../net/veth.js";
import type { EgressPolicy } from "../../domain/network.js";
import { setting } from "../../settings.js";

/** PATH for envd and, through it, every process in a user-namespace sandbox. */
const SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const MiB = 1024 * 1024;
/**
 * An empty sandbox cgroup older than this is a leftover (its server was
 * killed before it cleaned up): a start puts its first process in a new
 * group within moments, and every server on the host shares the parent.
 */
const LEFTOVER_GROUP_AGE_MS = 60_000;

export interface ProcessRuntimeOptions {
  /** pids.max per sandbox (default 1024). */
  pidsMax?: number;
  /** cgroup v2 directory for sandbox groups (default: LOCALE2B_CGROUP_PARENT, else detected). */
  cgroupParent?: string;
  /** envd's log level (default: LOCALE2B_ENVD_LOG_LEVEL, else info). */
  envdLogLevel?: string;
  /** Skip probing and isolate this way (tests). */
  forceMode?: IsolationMode;
  /** Where built templates are (default imagesDir()). */
  imagesDir?: string;
}

/**
 * The zero-config runtime. As root, each sandbox is a container-grade
 * sandbox on its template's root filesystem (launcher.ts: user, mount, pid,
 * UTS, IPC, network and cgroup namespaces, root inside mapped to an
 * unprivileged host id, Docker-like capabilities and seccomp filter, its own
 * ext4 disk of diskSizeMB, its own veth), reached over `<dir>/envd.sock`.
 * As an ordinary user: envd in user namespaces on the host's filesystem,
 * read-only (namespaces.ts). Sandboxes are detached: they outlive a
 * control-plane restart and are re-adopted. README.md in this folder says
 * what this isolation is and is not.
 */
export class ProcessRuntime implements Runtime {
  readonly name = "process";
  private caps: Promise<HostCapabilities> | undefined;
  private ids: IdRange | undefined;

  constructor(private readonly opts: ProcessRuntimeOptions = {}) {}

  /** Probes the host once; later calls share the answer. */
  capabilities(): Promise<HostCapabilities> {
    this.caps ??= probeHost({
      readOnlyRoot: setting("LOCALE2B_PROCESS_HOST_RW") !== "1",
      cgroupParent: this.opts.cgroupParent ?? setting("LOCALE2B_CGROUP_PARENT"),
      forceMode: this.opts.forceMode,
    });
    return this.caps;
  }

  /** The host ids sandbox ids map to (sandbox mode), registered on first use. */
  idRange(): IdRange {
    this.ids ??= sandboxIdRange();
    return this.ids;
  }

  async check(): Promise<string[]> {
    const caps = await this.capabilities();
    if (caps.mode !== "sandbox") return caps.notes;
    const ids = this.idRange();
    return [...caps.notes, `root inside a sandbox is host uid ${ids.base} (ids ${ids.base}-${ids.base + ids.count - 1}; ${ids.source})`];
  }

  async removeLeftovers(log: Logger): Promise<void> {
    const removed = (await this.capabilities()).cgroups?.sweep(LEFTOVER_GROUP_AGE_MS) ?? [];
    if (removed.length) log.info({ count: removed.length, names: removed.slice(0, 20) }, "removed the empty cgroups of sandboxes that are gone");
  }

  async egressUnsupported(): Promise<string | undefined> {
    const caps = await this.capabilities();
    if (caps.mode === "sandbox") return caps.noVeth;
    return "they need the server to run as root";
  }

  async volumesUnsupported(): Promise<string | undefined> {
    const caps = await this.capabilities();
    if (caps.mode !== "sandbox") return "volumes need the server to run as root (each volume is a loop-mounted ext4 image bound into sandboxes)";
    return caps.missing;
  }

  private limits(spec: InstanceSpec, cpuCount: number): CgroupLimits {
    return { memoryBytes: spec.memoryMB * MiB, cpuCount, pidsMax: this.opts.pidsMax ?? 1024 };
  }

  private logLevel(): string {
    return this.opts.envdLogLevel ?? setting("LOCALE2B_ENVD_LOG_LEVEL") ?? "info";
  }

  async create(spec: InstanceSpec): Promise<ProcessInstance> {
    const caps = await this.capabilities();
    if (caps.mode === "sandbox") return this.createSandbox(spec, caps);
    if (spec.egress) throw new Error(`egress allow/deny lists cannot be enforced on this host: ${await this.egressUnsupported()}`);
    if (spec.volumes?.length) throw new Error(`volumes cannot be mounted on this host: ${await this.volumesUnsupported()}`);
    return this.createHosted(spec, caps);
  }

  /** A sandbox on a copy of a filesystem snapshot's writable layer (sandbox mode only). */
  async createFromSnapshot(spec: InstanceSpec, from: SnapshotSource): Promise<ProcessInstance> {
    const caps = await this.capabilities();
    if (from.kind !== "filesystem") throw new Error(`the process runtime cannot start from a ${from.kind} snapshot`);
    if (caps.mode !== "sandbox") throw new Error("snapshots need the server to run as root (sandbox mode)");
    return this.createSandbox(spec, caps, from);
  }

  /** Sandbox mode: the template's root, its own disk, namespaces and network, started by the launcher. */
  private async createSandbox(spec: InstanceSpec, caps: HostCapabilities, from?: SnapshotSource): Promise<ProcessInstance> {
    if (caps.missing) throw new Error(`cannot start a sandbox: ${caps.missing}`);
    const image = sandboxImage(spec.templateId, this.opts.imagesDir ?? imagesDir(), from?.dir);
    if (!image) throw new Error(`template '${spec.templateId}' is not built on this host: run \`locale2b template build ${spec.templateId}\``);
    const initBinary = join(image.rootfsDir, GUEST.init.slice(1));
    // The init also starts the host commands a sandbox's start and end need (ip, nft, mkfs.ext4), without forking the server.
    offerSpawnHelper(initBinary);
    const ids = this.idRange();
    const layout = sandboxLayout(spec.dir);
    mkdirSync(layout.dir, { recursive: true, mode: 0o700 });
    chmodSync(layout.dir, 0o700);
    const cpuCount = spec.cpuCount > 0 ? spec.cpuCount : cpus().length;
    let cgroup: SandboxCgroup | undefined;
    let launched: Awaited<ReturnType<typeof launchSandbox>> | undefined;
    let net: NetRecord | undefined;
    try {
      // Its root is a layer over the build's files: that build stays while the sandbox (or a pause or snapshot of it) does.
      holdImage(image.dir, layout.dir, spec.log);
      const rootfs = await shiftedRootfs(image, ids.base);
      if (from) await copyImage(snapshotDiskPath(from.dir), layout.disk);
      else await createDisk(layout.disk, spec.diskSizeMB);
      cgroup = this.makeCgroup(spec, caps, cpuCount);
      launched = await launchSandbox({
        initBinary,
        sandboxId: spec.sandboxId,
        rootfs,
        disk: layout.disk,
        stateDir: layout.dir,
        socket: layout.socket,
        idBase: ids.base,
        idCount: ids.count,
        shmMB: Math.max(64, Math.floor(spec.memoryMB / 2)),
        cgroupProcs: cgroup?.procsFiles ?? [],
        dns: nameServers(),
        envdLogLevel: this.logLevel(),
        logFile: layout.log,
      });
      if (spec.volumes?.length) await mountVolumes(this.opts.imagesDir ?? imagesDir(), launched.initPid, spec.volumes, { uid: ids.base, gid: ids.base });
      // A way out only when the sandbox may have one: internet access, or an allow list.
      const wantNet = spec.allowInternetAccess || (spec.egress?.allow.length ?? 0) > 0;
      if (wantNet && !caps.noVeth) net = await attachVeth(spec.sandboxId, launched.initPid, spec.egress ?? { allow: [], deny: [] }, spec.log);
      else if (spec.egress) throw new Error(`egress allow/deny lists cannot be enforced on this host: ${caps.noVeth}`);
    } catch (err) {
      if (launched) {
        launched.child.kill("SIGKILL");
        await cgroup?.killAll().catch(() => undefined);
      }
      await cgroup?.remove().catch(() => undefined);
      if (net) await releaseDevice(net.device, spec.sandboxId);
      rmSync(layout.dir, { recursive: true, force: true });
      throw err;
    }
    spec.log.debug({ pid: launched.pid, initPid: launched.initPid, cgroup: cgroup?.kind, net: net?.device }, "sandbox started");
    return new ProcessInstance({
      sandboxId: spec.sandboxId,
      layout,
      pid: launched.pid,
      startTime: procStat(launched.pid)?.startTime ?? 0,
      initPid: launched.initPid,
      initStartTime: procStat(launched.initPid)?.startTime ?? 0,
      mode: "sandbox",
      cgroup,
      cpuCount,
      memoryMB: spec.memoryMB,
      user: GUEST.user,
      workdir: GUEST.home,
      log: spec.log,
      child: launched.child,
      net,
      policy: spec.egress,
    });
  }

  private makeCgroup(spec: InstanceSpec, caps: HostCapabilities, cpuCount: number): SandboxCgroup | undefined {
    try {
      const group = caps.cgroups?.create(spec.sandboxId, this.limits(spec, cpuCount));
      if (spec.background) group?.setBackground(true);
      return group;
    } catch (err) {
      spec.log.warn({ err }, "cannot create the sandbox's cgroup: it runs without limits");
      return undefined;
    }
  }

  /** User-namespace (or no) isolation on the host's filesystem: an ordinary user's sandboxes. */
  private async createHosted(spec: InstanceSpec, caps: HostCapabilities): Promise<ProcessInstance> {
    const layout = sandboxLayout(spec.dir);
    const files = userFiles();
    const mode = caps.mode as Exclude<IsolationMode, "sandbox">;
    prepareSandboxFs(layout, files, undefined);
    const cpuCount = spec.cpuCount > 0 ? spec.cpuCount : cpus().length;
    const cgroup = this.makeCgroup(spec, caps, cpuCount);
    const isolated = mode !== "none";
    // With `user` mapped, envd's processes run as `user`; without that mapping only its own (root there) can.
    // Without namespaces envd is on the host, where envd's own default as root is the host's `user` account
    // if it has one: its processes run as whoever runs the control plane instead, as check() says.
    const user = isolated ? (caps.userMapping ? SANDBOX_USER : "root") : process.getuid?.() === 0 ? "root" : undefined;
    const command = [process.execPath, ...GUEST.nodeFlags, cliEntry(), "envd", "--listen", `unix+vsock://${layout.socket}`];
    if (user) command.push("--user", user);
    if (isolated) command.push("--workdir", SANDBOX_HOME);
    const launch = buildLaunch({
      mode,
      sandboxId: spec.sandboxId,
      layout,
      bin: { unshare: caps.bin.unshare ?? "unshare", mount: caps.bin.mount ?? "mount", ip: caps.bin.ip },
      isolateNet: !spec.allowInternetAccess && caps.netns,
      readOnlyRoot: caps.readOnlyRoot,
      innerUser: mode === "userns" && caps.userMapping ? files.user : undefined,
      cgroupProcs: cgroup?.procsFiles ?? [],
      keep: isolated ? pathsToKeep(layout, runtimePaths()) : [],
      command,
    });
    if (launch.fstab) writeFileSync(layout.fstab, launch.fstab);
    const logFd = openSync(layout.log, "a");
    let child;
    try {
      child = spawn(launch.file, launch.args, {
        detached: true,
        stdio: ["ignore", logFd, logFd],
        cwd: "/",
        env: { PATH: SANDBOX_PATH, LOCALE2B_LOG_LEVEL: this.logLevel() },
      });
    } finally {
      closeSync(logFd);
    }
    child.on("error", (err) => spec.log.error({ err }, "cannot start the sandbox"));
    child.unref();
    const pid = child.pid;
    if (!pid) {
      await cgroup?.remove().catch(() => undefined);
      throw new Error("failed to start the sandbox: /bin/sh could not be spawned");
    }
    spec.log.debug({ pid, mode, cgroup: cgroup?.kind }, "sandbox started");
    return new ProcessInstance({
      sandboxId: spec.sandboxId,
      layout,
      pid,
      startTime: procStat(pid)?.startTime ?? 0,
      mode,
      cgroup,
      cpuCount,
      memoryMB: spec.memoryMB,
      user,
      workdir: isolated ? SANDBOX_HOME : undefined,
      log: spec.log,
      child,
    });
  }

  async adopt(sandboxId: string, dir: string, persisted: Record<string, unknown>, log: Logger): Promise<ProcessInstance | undefined> {
    const p = persisted as Partial<PersistedProcessInstance>;
    const layout = sandboxLayout(dir);
    const pid = Number(p.pid);
    const startTime = typeof p.startTime === "number" ? p.startTime : undefined;
    const mode: IsolationMode = p.mode === "sandbox" || p.mode === "userns" || p.mode === "none" ? p.mode : "none";
    // Ours only if alive, the same process (start time) and running this sandbox.
    // While the launch chain execs, /proc/<pid>/cmdline reads empty for an instant: look again.
    let ours = false;
    for (let i = 0; i < 20 && isRunning(pid, startTime); i++) {
      const args = cmdline(pid);
      if (args.length > 0) {
        ours = mode === "sandbox" ? isLauncherOf(args, sandboxId) : args.includes(`unix+vsock://${layout.socket}`) || args.includes(`locale2b-sandbox:${sandboxId}`);
        break;
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    // No record of its group: a start a server died in the middle of (a warm sandbox). Its group has the sandbox's name.
    const cgroup = openCgroup(p.cgroup, sandboxId) ?? (p.cgroup === undefined ? (await this.capabilities()).cgroups?.find(sandboxId) : undefined);
    const net = isNetRecord(p.net) ? p.net : isNetRecord(persisted.egress) ? (persisted.egress as NetRecord) : undefined;
    if (!ours) {
      if (cgroup) {
        // Died while we were down: release what is left of it.
        await cgroup
          .killAll()
          .then(() => cgroup.remove())
          .catch((err: unknown) => log.warn({ err }, "cannot clean up a dead sandbox's cgroup"));
      }
      if (net) await releaseDevice(net.device, sandboxId);
      rmSync(dir, { recursive: true, force: true });
      return undefined;
    }
    const policy = isPolicy(p.policy) ? p.policy : undefined;
    // The host's rules may be from another server version (rewritten at its first use): put the sandbox's back.
    if (net) await updateVethPolicy(net, sandboxId, policy ?? { allow: [], deny: [] }, log).catch((err: unknown) => log.warn({ err }, "cannot restore the sandbox's network rules"));
    return new ProcessInstance({
      sandboxId,
      layout,
      pid,
      startTime: startTime ?? procStat(pid)?.startTime ?? 0,
      initPid: typeof p.initPid === "number" ? p.initPid : undefined,
      initStartTime: typeof p.initStartTime === "number" ? p.initStartTime : undefined,
      mode,
      cgroup,
      cpuCount: Number(p.cpuCount) || 1,
      memoryMB: Number(p.memoryMB) || 512,
      user: typeof p.user === "string" ? p.user : undefined,
      workdir: typeof p.workdir === "string" ? p.workdir : undefined,
      log,
      net,
      policy,
    });
  }
}

function isPolicy(v: unknown): v is EgressPolicy {
  const p = v as Partial<EgressPolicy> | undefined;
  return Array.isArray(p?.allow) && Array.isArray(p.deny);
}
