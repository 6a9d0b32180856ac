import { spawn } from "node:child_process";
import { closeSync, openSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import type { Logger } from "pino";
import type { InstanceSpec, Runtime } from "../runtime.js";
import { findTemplateImage, GUEST, imagesDir, type GuestImage } from "../../images/layout.js";
import { cliEntry } from "../paths.js";
import { probeHost, runtimePaths, type HostCapabilities } from "./capabilities.js";
import { openCgroup } from "./cgroup-detect.js";
import type { SandboxCgroup } from "./cgroups.js";
import { ProcessInstance, type PersistedProcessInstance } from "./instance.js";
import { buildLaunch, pathsToKeep, type IsolationMode } from "./namespaces.js";
import { cmdline, isRunning, procStat, signalGroup } from "./procfs.js";
import { egressUnsupported, setUpEgress, type EgressRecord } from "./egress-net.js";
import { releaseDevice } from "../egress-nft.js";
import { prepareTemplateDirs } from "./template-root.js";
import { prepareSandboxFs, SANDBOX_HOME, SANDBOX_USER, sandboxLayout, userFiles } from "./sandbox-fs.js";

/** PATH for envd and, through it, every process in a sandbox. */
const SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const MiB = 1024 * 1024;

export interface ProcessRuntimeOptions {
  /**
   * Remount the host's filesystem read-only inside sandboxes (their /home/user,
   * /root, /tmp and /dev/shm stay writable). Default on; LOCALE2B_PROCESS_HOST_RW=1 turns it off.
   */
  readOnlyRoot?: boolean;
  /** pids.max per sandbox (default 4096). */
  pidsMax?: number;
  /** cgroup v2 directory for sandbox groups (default: LOCALE2B_CGROUP_PARENT, else detected). */
  cgroupParent?: string;
  /** envd's log level (default: LOCALE2B_ENVD_LOG_LEVEL, else info). */
  envdLogLevel?: string;
  /** Skip probing and isolate this way (tests). */
  forceMode?: IsolationMode;
  /**
   * Run each sandbox on its template's built root filesystem (the image the
   * VMs boot: its own init, Node and envd) instead of the host's, read-only
   * under a per-sandbox overlay. Needs root. Default: LOCALE2B_PROCESS_ROOTFS=template.
   */
  templateRootfs?: boolean;
  /** Where built templates are (default imagesDir()). */
  imagesDir?: string;
}

/**
 * The zero-config runtime: each sandbox is envd in its own mount, pid, uts
 * and ipc namespaces (net too when offline), with a private /home/user,
 * /root, /tmp and /dev/shm, running processes as `user`, under cgroup
 * limits where the host allows, serving the hybrid-vsock handshake on
 * `<dir>/envd.sock`. Sandboxes are detached: they outlive a control-plane
 * restart and are re-adopted. See README.md in this folder for how this
 * isolation compares with a VM.
 */
export class ProcessRuntime implements Runtime {
  readonly name = "process";
  private caps: Promise<HostCapabilities> | undefined;

  constructor(private readonly opts: ProcessRuntimeOptions = {}) {}

  /** Probes the host once (namespaces, user namespaces, cgroups); later calls share the answer. */
  capabilities(): Promise<HostCapabilities> {
    this.caps ??= probeHost({
      readOnlyRoot: this.opts.readOnlyRoot ?? process.env.LOCALE2B_PROCESS_HOST_RW !== "1",
      cgroupParent: this.opts.cgroupParent ?? process.env.LOCALE2B_CGROUP_PARENT,
      forceMode: this.opts.forceMode,
    });
    return this.caps;
  }

  async check(): Promise<string[]> {
    return (await this.capabilities()).notes;
  }

  async egressUnsupported(): Promise<string | undefined> {
    const caps = await this.capabilities();
    return egressUnsupported(caps.mode, caps.netns);
  }

  async create(spec: InstanceSpec): Promise<ProcessInstance> {
    const caps = await this.capabilities();
    if (spec.egress) {
      const why = egressUnsupported(caps.mode, caps.netns);
      if (why) throw new Error(`egress allow/deny lists cannot be enforced on this host: ${why}`);
    }
    const layout = sandboxLayout(spec.dir);
    const files = userFiles();
    const mode = caps.mode;
    const image = this.templateImage(spec.templateId, mode);
    prepareSandboxFs(layout, files, mode === "root" ? files.user : undefined);
    if (image) prepareTemplateDirs(layout);
    const cpuCount = spec.cpuCount > 0 ? spec.cpuCount : cpus().length;
    let cgroup: SandboxCgroup | undefined;
    try {
      cgroup = caps.cgroups?.create(spec.sandboxId, {
        memoryBytes: spec.memoryMB * MiB,
        cpuCount,
        pidsMax: this.opts.pidsMax ?? 4096,
      });
    } catch (err) {
      spec.log.warn({ err }, "cannot create the sandbox's cgroup: it runs without limits");
    }
    const isolated = mode !== "none";
    // As root, or in a user namespace where `user` is mapped, envd's processes run as `user`; in a user
    // namespace without that mapping only its own (root there) can run them.
    const user = image ? GUEST.user : isolated ? (mode === "root" || caps.userMapping ? SANDBOX_USER : "root") : undefined;
    const command = [process.execPath, cliEntry(), "envd", "--listen", `unix+vsock://${layout.socket}`];
    if (user) command.push("--user", user, "--workdir", SANDBOX_HOME);
    const launch = buildLaunch({
      mode,
      sandboxId: spec.sandboxId,
      layout,
      bin: { unshare: caps.bin.unshare ?? "unshare", mount: caps.bin.mount ?? "mount", ip: caps.bin.ip },
      // An egress policy needs the sandbox's own network namespace, joined to the host below.
      isolateNet: (!spec.allowInternetAccess || spec.egress !== undefined) && caps.netns,
      readOnlyRoot: caps.readOnlyRoot,
      innerUser: mode === "userns" && caps.userMapping ? files.user : undefined,
      cgroupProcs: cgroup?.procsFiles ?? [],
      keep: isolated && !image ? pathsToKeep(layout, runtimePaths()) : [],
      command,
      rootfsDir: image?.rootfsDir,
    });
    if (launch.fstab) writeFileSync(layout.fstab, launch.fstab);
    const logFd = openSync(layout.log, "a");
    let child;
    try {
      child = spawn(launch.file, launch.args, {
        detached: true,
        stdio: ["ignore", logFd, logFd],
        cwd: "/",
        env: {
          PATH: SANDBOX_PATH,
          LOCALE2B_LOG_LEVEL: this.opts.envdLogLevel ?? process.env.LOCALE2B_ENVD_LOG_LEVEL ?? "info",
        },
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
    const startTime = procStat(pid)?.startTime ?? 0;
    spec.log.debug({ pid, mode, cgroup: cgroup?.kind }, "sandbox started");
    let egress: EgressRecord | undefined;
    if (spec.egress) {
      try {
        egress = await setUpEgress(spec.sandboxId, pid, spec.egress, spec.log);
      } catch (err) {
        signalGroup(pid, "SIGKILL");
        await cgroup?.killAll().then(() => cgroup?.remove()).catch(() => undefined);
        throw new Error(`cannot set up the sandbox's network: ${(err as Error).message}`);
      }
    }
    return new ProcessInstance({
      egress,
      sandboxId: spec.sandboxId,
      layout,
      pid,
      startTime,
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

  /** The built template to run on, when this runtime runs sandboxes on template roots. */
  private templateImage(templateId: string, mode: IsolationMode): GuestImage | undefined {
    const wanted = this.opts.templateRootfs ?? process.env.LOCALE2B_PROCESS_ROOTFS === "template";
    if (!wanted) return undefined;
    if (mode !== "root") {
      throw new Error("sandboxes on a template's root filesystem need the control plane to run as root (overlay mounts, pivot_root)");
    }
    const image = findTemplateImage(templateId, this.opts.imagesDir ?? imagesDir());
    if (!image) throw new Error(`template '${templateId}' is not built on this host: run \`locale2b template build ${templateId}\``);
    return image;
  }

  async adopt(sandboxId: string, dir: string, persisted: Record<string, unknown>, log: Logger): Promise<ProcessInstance | undefined> {
    const p = persisted as Partial<PersistedProcessInstance>;
    const layout = sandboxLayout(dir);
    const pid = Number(p.pid);
    const startTime = typeof p.startTime === "number" ? p.startTime : undefined;
    // Ours only if alive, the same process (start time) and serving this sandbox's socket.
    // While the launch chain execs, /proc/<pid>/cmdline reads empty for an instant: look again.
    let ours = false;
    for (let i = 0; i < 20 && isRunning(pid, startTime); i++) {
      const args = cmdline(pid);
      if (args.length > 0) {
        ours = args.includes(`unix+vsock://${layout.socket}`) || args.includes(`locale2b-sandbox:${sandboxId}`);
        break;
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    const cgroup = openCgroup(p.cgroup, sandboxId);
    if (!ours) {
      if (cgroup) {
        // Died while we were down: release what is left of it.
        await cgroup
          .killAll()
          .then(() => cgroup.remove())
          .catch((err: unknown) => log.warn({ err }, "cannot clean up a dead sandbox's cgroup"));
      }
      if (isEgressRecord(p.egress)) await releaseDevice(p.egress.device, sandboxId);
      return undefined;
    }
    const mode: IsolationMode = p.mode === "root" || p.mode === "userns" || p.mode === "none" ? p.mode : "none";
    return new ProcessInstance({
      egress: isEgressRecord(p.egress) ? p.egress : undefined,
      sandboxId,
      layout,
      pid,
      startTime: startTime ?? (procStat(pid)?.startTime ?? 0),
      mode,
      cgroup,
      cpuCount: Number(p.cpuCount) || 1,
      memoryMB: Number(p.memoryMB) || 512,
      user: typeof p.user === "string" ? p.user : undefined,
      workdir: typeof p.workdir === "string" ? p.workdir : undefined,
      log,
    });
  }
}


function isEgressRecord(v: unknown): v is EgressRecord {
  const r = v as Partial<EgressRecord> | undefined;
  return typeof r?.device === "string" && typeof r.index === "number";
}
