// Volumes in a QEMU microVM: virtio-fs. An ext4 image cannot be mounted by
// several VMs (or a VM and the host) at once, so each volume of a VM is served
// from the host's mount by its own virtiofsd (QEMU's C daemon, its
// `sandbox=namespace` mode: own mount, pid and net namespaces, pivot_root
// into the shared directory, so nothing outside the volume is reachable), on
// a vhost-user socket in the sandbox's directory; QEMU gives the guest a
// `vhost-user-fs-device` (the VM's memory is already a shared memfd, for
// vhost-user vsock) with the tag `l2bvol<n>`, and the control plane mounts it
// through envd once the guest is up (GuestVolume, mountGuestVolumes).
// virtiofsd serves host ids unshifted, while a volume's files belong to the
// process runtime's shifted ids (user = base + 1000): its shared directory is
// an id-mapped bind of the volume (volumes/native/idmap-bind.c), made in
// virtiofsd's own private mount namespace (the host never has it).
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { VolumeBinding } from "../../domain/volume.js";
import { findExecutable } from "../../host/executables.js";
import { setting } from "../../settings.js";
import type { GuestVolume } from "../runtime.js";
import { idmapHelper, shiftArgs } from "../../volumes/idmap-bind.js";

const CANDIDATES = ["/usr/lib/qemu/virtiofsd", "/usr/libexec/virtiofsd"];

/** virtiofsd: LOCALE2B_VIRTIOFSD, else PATH, else where Debian and Fedora put it. */
export function findVirtiofsd(): string | undefined {
  return findExecutable("virtiofsd", setting("LOCALE2B_VIRTIOFSD")) ?? CANDIDATES.find((p) => existsSync(p));
}

export const virtiofsTag = (i: number): string => `l2bvol${i}`;
export const virtiofsSocket = (dir: string, i: number): string => join(dir, `virtiofs-${i}.sock`);
/** The (empty, on the host) directory virtiofsd's id-mapped bind covers in its own namespace. */
const sharedDir = (dir: string, i: number): string => join(dir, "volumes", String(i));

/** QEMU's arguments for the VM's volumes (one vhost-user-fs device each). */
export function virtiofsQemuArgs(dir: string, count: number): string[] {
  // microvm's virtio-mmio transports are legacy (virtio 0.9) by default, and virtiofsd's libvhost-user
  // refuses legacy devices ("virtio legacy devices aren't supported", then QEMU exits): modern ones.
  const out: string[] = count > 0 ? ["-global", "virtio-mmio.force-legacy=false"] : [];
  for (let i = 0; i < count; i++) {
    out.push("-chardev", `socket,id=vfs${i},path=${virtiofsSocket(dir, i)}`, "-device", `vhost-user-fs-device,chardev=vfs${i},tag=${virtiofsTag(i)}`);
  }
  return out;
}

/** The guest's mounts for `volumes`, in order. */
export function guestVolumes(volumes: Pick<VolumeBinding, "path">[]): GuestVolume[] {
  return volumes.map((v, i) => ({ tag: virtiofsTag(i), path: v.path }));
}

/**
 * The command that serves volume `i` (the helper binds it id-mapped, then
 * execs virtiofsd). cache=none: other sandboxes and the file API change the
 * same files at any time, so the guest must not keep stale pages or entries.
 */
export async function virtiofsdCommand(imagesDir: string, virtiofsd: string, dir: string, i: number, hostPath: string): Promise<{ file: string; args: string[] }> {
  const shared = sharedDir(dir, i);
  mkdirSync(shared, { recursive: true, mode: 0o700 });
  const helper = await idmapHelper(imagesDir);
  return {
    file: helper,
    args: [
      ...shiftArgs(),
      hostPath,
      shared,
      "--",
      virtiofsd,
      `--socket-path=${virtiofsSocket(dir, i)}`,
      "-o", `source=${shared}`,
      "-o", "sandbox=namespace",
      "-o", "cache=none",
      "-o", "no_xattr",
      // No device nodes in a volume, whatever root in the guest asks.
      "-o", "modcaps=-mknod",
      "-o", "log_level=warn",
    ],
  };
}
