// The OCI runtime spec (config.json) of one gVisor sandbox: the template's
// root filesystem (with the sandbox's writable layer, mounted by rootfs.ts),
// `locale2b-init` as PID 1 serving the hybrid-vsock socket in a host
// directory bind-mounted at HOST_DIR, cgroup limits, and the network
// namespace runsc attaches its netstack to.
import { GUEST } from "../../images/layout.js";
import { setting } from "../../settings.js";
import type { BundleVolume } from "./volume-binds.js";

/** Where the sandbox sees its host directory (envd's hybrid-vsock socket is created there). */
export const HOST_DIR = "/run/locale2b-host";
/** The socket's name, in the host directory on both sides. */
export const SOCKET_NAME = "envd.sock";

/** Docker's default capability set: root inside can chown, setuid (sudo), bind low ports, nothing more. */
const CAPS = [
  "CAP_CHOWN",
  "CAP_DAC_OVERRIDE",
  "CAP_FSETID",
  "CAP_FOWNER",
  "CAP_MKNOD",
  "CAP_NET_RAW",
  "CAP_SETGID",
  "CAP_SETUID",
  "CAP_SETFCAP",
  "CAP_SETPCAP",
  "CAP_NET_BIND_SERVICE",
  "CAP_SYS_CHROOT",
  "CAP_KILL",
  "CAP_AUDIT_WRITE",
];

const MiB = 1024 * 1024;
const CPU_PERIOD_US = 100_000;
/** /run holds only sockets and pid files: a bound keeps root inside from filling the memory through it. */
const RUN_BYTES = 64 * MiB;

/**
 * The host cgroup's pids.max for a sandbox of `pidsMax` tasks inside. Each
 * guest process is a systrap stub on the host (a process and its clone) plus
 * the sentry's and gofer's threads: the limit inside (gVisor's pids cgroup)
 * must be what stops a fork bomb, with EAGAIN; a host limit reached first
 * fails the sentry's clone of a stub, and runsc 20240729 then panics.
 */
export function hostPidsMax(pidsMax: number): number {
  return pidsMax * 4 + 256;
}

/**
 * envd's output pipes under gVisor: 1 MiB (rootfs/init/spawn.c), and once a
 * command has printed 1 MiB, 2 ms between the reads that empty them
 * (envd/process/handler/pooled-pipe.ts). Every wake-up of envd by a writer
 * is a trip through gVisor's kernel; `head -c 64M` (4 KiB writes) woke it
 * for nearly every write. docs/runtimes.md has the measurements.
 */
export function outputEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  const ms = setting("LOCALE2B_GVISOR_OUTPUT_COALESCE_MS", env) ?? "2"; // "0": neither (as before)
  return ms === "0" ? [] : ["LOCALE2B_OUTPUT_PIPE_SIZE=1048576", `LOCALE2B_OUTPUT_COALESCE_MS=${Number(ms) || 2}`];
}

/** Where the sandbox's own cgroups are mounted: gVisor's, in its kernel (the container's group is the mount's root). */
export const GUEST_PIDS_MAX = "/sys/fs/cgroup/pids/pids.max";

export interface BundleSpec {
  sandboxId: string;
  /** Host path of the sandbox's merged root filesystem. */
  rootfs: string;
  /** Host directory bind-mounted at HOST_DIR. */
  hostDir: string;
  /** `/run/netns/<name>` of a namespace with the sandbox's veth, or undefined: a new one with `lo` only. */
  netnsPath?: string;
  memoryMB: number;
  cpuCount: number;
  /** Tasks (processes and threads) in the sandbox: gVisor's own pids cgroup, set by guestPidsLimit after the start. */
  pidsMax: number;
  envdLogLevel: string;
  /** The cgroup path runsc creates in every controller, relative to the control plane's own group. */
  cgroupsPath: string;
  /** Volumes: id-mapped binds of their host mounts (volume-binds.ts), nodev and nosuid. */
  volumes?: BundleVolume[];
}

export function ociSpec(s: BundleSpec): Record<string, unknown> {
  const shmBytes = Math.max(64, Math.floor(s.memoryMB / 2)) * MiB;
  return {
    ociVersion: "1.0.2",
    process: {
      user: { uid: 0, gid: 0 },
      args: [GUEST.init, "--hybrid-listen", `${HOST_DIR}/${SOCKET_NAME}`, "--forward-ports", "--no-mounts", "--envd-log", s.envdLogLevel, ...outputEnv().flatMap((e) => ["--env", e])],
      env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"],
      cwd: "/",
      capabilities: { bounding: CAPS, effective: CAPS, permitted: CAPS },
      rlimits: [{ type: "RLIMIT_NOFILE", hard: 65536, soft: 65536 }],
      noNewPrivileges: false,
    },
    root: { path: s.rootfs, readonly: false },
    hostname: s.sandboxId,
    mounts: [
      { destination: "/proc", type: "proc", source: "proc" },
      { destination: "/dev", type: "tmpfs", source: "tmpfs", options: ["nosuid", "strictatime", "mode=755", "size=65536k"] },
      { destination: "/dev/pts", type: "devpts", source: "devpts", options: ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"] },
      { destination: "/dev/shm", type: "tmpfs", source: "shm", options: ["nosuid", "nodev", "mode=1777", `size=${shmBytes}`] },
      { destination: "/sys", type: "sysfs", source: "sysfs", options: ["nosuid", "noexec", "nodev", "ro"] },
      // gVisor's cgroupfs (its own kernel's, not the host's): its pids controller fails fork/clone with EAGAIN.
      { destination: "/sys/fs/cgroup", type: "cgroup", source: "cgroup", options: ["nosuid", "noexec", "nodev", "ro"] },
      { destination: "/run", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev", "mode=755", `size=${RUN_BYTES}`] },
      { destination: HOST_DIR, type: "bind", source: s.hostDir, options: ["rbind", "rw"] },
      ...(s.volumes ?? []).map((v) => ({ destination: v.destination, type: "bind", source: v.source, options: ["bind", "rw", "nodev", "nosuid"] })),
    ],
    linux: {
      cgroupsPath: s.cgroupsPath,
      resources: {
        memory: { limit: s.memoryMB * MiB },
        cpu: { quota: Math.round(s.cpuCount * CPU_PERIOD_US), period: CPU_PERIOD_US },
        pids: { limit: hostPidsMax(s.pidsMax) },
      },
      namespaces: [{ type: "pid" }, { type: "ipc" }, { type: "uts" }, { type: "mount" }, { type: "network", ...(s.netnsPath ? { path: s.netnsPath } : {}) }],
    },
  };
}
