// A gVisor sandbox's files on the host, all under its own directory:
//   bundle/config.json   the OCI spec (bundle.ts)
//   bundle/rootfs/       its `/`: an overlay of the template's rootfs (read-only, shared by every
//                        sandbox) and upper/ on disk/, runsc's gofer serves it (--overlay2=none)
//   disk.ext4, disk/     its writable layer: an ext4 image of diskSizeMB on a loop device, so a
//                        full disk is ENOSPC inside and the host's disk is untouched
//   host/envd.sock       the hybrid-vsock socket locale2b-init creates (HOST_DIR inside)
//   runsc/               runsc's state (--root)
//   checkpoint/          while paused: the sandbox's checkpoint image (memory, kernel state)
//   sandbox.log          runsc's errors and the sandbox's console (init, envd)
import { execFile } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { findExecutable } from "../../host/executables.js";
import { copyImage } from "../process/disk-snapshot.js";
import { createDisk } from "../process/sandbox-root.js";
import { SOCKET_NAME } from "./bundle.js";
import { unbindVolumes } from "./volume-binds.js";

const exec = promisify(execFile);

export interface GvisorLayout {
  dir: string;
  bundle: string;
  config: string;
  rootfs: string;
  disk: string;
  diskMount: string;
  hostDir: string;
  /** Where the sandbox's init creates envd's socket: in the host directory it shares (and can write). */
  socket: string;
  /**
   * Where the control plane dials it: the same socket, renamed out of the
   * shared directory once it is there (see GvisorInstance.vsockReady).
   */
  dialSocket: string;
  runscRoot: string;
  /** A pause's checkpoint image (runsc checkpoint --image-path): the sandbox's memory and state while it is paused. */
  checkpoint: string;
  log: string;
}

/** A snapshot directory: the disk image as of the snapshot, and (memory snapshots) the checkpoint image. */
export const snapshotDisk = (dir: string): string => join(dir, "disk.ext4");
export const snapshotCheckpoint = (dir: string): string => join(dir, "checkpoint");

/** The file the init writes beside its socket once it has closed its host listener and connections (before a checkpoint). */
export const quiescedAck = (l: GvisorLayout): string => `${l.socket}.quiesced`;

export function gvisorLayout(dir: string): GvisorLayout {
  const bundle = join(dir, "bundle");
  const hostDir = join(dir, "host");
  return {
    dir,
    bundle,
    config: join(bundle, "config.json"),
    rootfs: join(bundle, "rootfs"),
    disk: join(dir, "disk.ext4"),
    diskMount: join(dir, "disk"),
    hostDir,
    socket: join(hostDir, SOCKET_NAME),
    dialSocket: join(dir, SOCKET_NAME),
    runscRoot: join(dir, "runsc"),
    checkpoint: join(dir, "checkpoint"),
    log: join(dir, "sandbox.log"),
  };
}

async function sh(cmd: string, args: string[]): Promise<void> {
  const bin = findExecutable(cmd) ?? cmd;
  try {
    await exec(bin, args);
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr || (err as Error).message).trim();
    throw new Error(`${cmd} ${args.join(" ")} failed: ${why}`);
  }
}

/** Whether `path` is a mount point (in our mount namespace). */
async function mounted(path: string): Promise<boolean> {
  return exec(findExecutable("mountpoint") ?? "mountpoint", ["-q", path]).then(
    () => true,
    () => false,
  );
}

/**
 * Makes the sandbox's root: the disk image, mounted, and the overlay of the
 * template's rootfs with it, plus the sandbox's own /etc/hostname, hosts and
 * resolv.conf. On failure what was mounted is unmounted again.
 */
export async function mountRoot(
  l: GvisorLayout,
  templateRootfs: string,
  diskSizeMB: number,
  etc: { hostname: string; dns: string[] },
  /** A snapshot's disk image to start on (copied), instead of a fresh one. */
  fromDisk?: string,
): Promise<void> {
  for (const d of [l.bundle, l.rootfs, l.diskMount, l.hostDir, l.runscRoot]) mkdirSync(d, { recursive: true, mode: 0o700 });
  if (fromDisk) await copyImage(fromDisk, l.disk);
  else await createDisk(l.disk, diskSizeMB);
  try {
    await sh("mount", ["-o", "loop,discard,nosuid,nodev", l.disk, l.diskMount]);
    mkdirSync(join(l.diskMount, "upper"), { recursive: true, mode: 0o755 });
    mkdirSync(join(l.diskMount, "work"), { recursive: true, mode: 0o700 });
    await sh("mount", ["-t", "overlay", "overlay", "-o", `lowerdir=${templateRootfs},upperdir=${l.diskMount}/upper,workdir=${l.diskMount}/work`, l.rootfs]);
    const etcDir = join(l.rootfs, "etc");
    const put = (name: string, text: string) => {
      rmSync(join(etcDir, name), { force: true });
      writeFileSync(join(etcDir, name), text, { mode: 0o644 });
    };
    put("hostname", `${etc.hostname}\n`);
    put("hosts", `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${etc.hostname}\n`);
    if (etc.dns.length) put("resolv.conf", etc.dns.map((d) => `nameserver ${d}\n`).join(""));
  } catch (err) {
    await unmountRoot(l);
    throw err;
  }
}

/** Unmounts the overlay and the disk (lazily if something still holds them); idempotent. */
export async function unmountRoot(l: GvisorLayout): Promise<void> {
  for (const p of [l.rootfs, l.diskMount]) {
    if (!(await mounted(p))) continue;
    await sh("umount", [p]).catch(() => sh("umount", ["-l", p]));
  }
}

/** Removes the sandbox's directory, never crossing into a file system still mounted below it. */
export async function removeSandboxDir(l: GvisorLayout): Promise<void> {
  await unmountRoot(l);
  await unbindVolumes(l.dir); // a start cut short may have left a volume's id-mapped bind
  await sh("rm", ["-rf", "--one-file-system", "--", l.dir]);
}
