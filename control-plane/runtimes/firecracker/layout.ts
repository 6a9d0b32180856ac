// Where one microVM's files are, as the host sees them and as Firecracker is
// told about them. Firecracker is told paths relative to its working
// directory, the sandbox's directory (only its API socket, which the host
// matches in its command line, is absolute); with the jailer it runs chrooted
// in <chroot base>/<exec name>/<id>/root and is given paths from that root.
// Either way a snapshot records the disk and vsock socket as paths of
// whichever VM loads it: a fork restored in another directory opens its own
// disk copy, never its source's.
import { rmSync } from "node:fs";
import { basename, join } from "node:path";

/** The files Firecracker works with, relative to its root. */
const FILES = {
  apiSock: "fc.sock",
  vsock: "vsock.sock",
  rootfs: "rootfs.ext4",
  kernel: "vmlinux",
  snapshotDir: "snapshot",
  vmstate: join("snapshot", "vmstate"),
  memory: join("snapshot", "memory"),
  /** Where a memory snapshot of a running VM is written before it moves to the snapshot store. */
  captureDir: "capture",
  captureVmstate: join("capture", "vmstate"),
  captureMemory: join("capture", "memory"),
} as const;

export type VmFile = keyof typeof FILES;

export interface JailSpec {
  /** --chroot-base-dir */
  chrootBase: string;
  /** The firecracker binary the jailer execs (--exec-file). */
  execFile: string;
  uid: number;
  gid: number;
}

export interface VmLayout {
  /** The sandbox's directory: the console log and the state file stay here, outside any jail. */
  dir: string;
  /** The guest's serial console and Firecracker's own messages (its stdout and stderr). */
  console: string;
  /** The runtime's record of this VM (see state.ts), always current. */
  stateFile: string;
  /** The host directory Firecracker's paths start from: `dir`, or the jail's root. */
  root: string;
  /** The jail's own directory (`<chroot base>/<exec name>/<id>`), removed on kill. */
  jailDir?: string;
  /** A file as the host sees it. */
  host(file: VmFile): string;
  /** The same file as Firecracker is told about it (relative to its working directory, or inside the jail). */
  vm(file: VmFile): string;
}

export function vmLayout(dir: string, sandboxId: string, jail?: Pick<JailSpec, "chrootBase" | "execFile">): VmLayout {
  if (!jail) {
    return {
      dir,
      console: join(dir, "console.log"),
      stateFile: join(dir, "firecracker.json"),
      root: dir,
      host: (f) => join(dir, FILES[f]),
      vm: (f) => (f === "apiSock" || f === "kernel" ? join(dir, FILES[f]) : FILES[f]),
    };
  }
  const jailDir = join(jail.chrootBase, basename(jail.execFile), sandboxId);
  const root = join(jailDir, "root");
  return {
    dir,
    console: join(dir, "console.log"),
    stateFile: join(dir, "firecracker.json"),
    root,
    jailDir,
    host: (f) => join(root, FILES[f]),
    vm: (f) => `/${FILES[f]}`,
  };
}

/** Linux's sun_path holds 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH = 107;

/** Throws a clear error when a Unix socket path is too long to bind or connect to. */
export function checkSocketPath(path: string): void {
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH) {
    throw new Error(
      `socket path ${path} is ${Buffer.byteLength(path)} bytes, more than the ${MAX_SOCKET_PATH} a Unix socket allows: use a shorter data dir (--data-dir)`,
    );
  }
}

/** Removes every file of the VM but its console log: sockets, disk, snapshot and capture files, the runtime's record, the jail. */
export function removeVmFiles(l: VmLayout): void {
  for (const f of ["apiSock", "vsock", "rootfs", "snapshotDir", "captureDir"] as const) rmSync(l.host(f), { recursive: true, force: true });
  rmSync(l.stateFile, { force: true });
  if (l.jailDir) rmSync(l.jailDir, { recursive: true, force: true });
}
