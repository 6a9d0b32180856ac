// The optional jailer (LOCALE2B_FIRECRACKER_JAILER=1): Firecracker runs
// chrooted in <chroot base>/firecracker/<id>/root as an unprivileged uid/gid.
// The jail's root holds everything the VM opens (disk, kernel, sockets,
// snapshot). Not exercised on the project's CI machines (no jailer there).
import { basename, join } from "node:path";
import { chownSync, copyFileSync, linkSync, mkdirSync, rmSync } from "node:fs";
import type { JailSpec, VmLayout } from "./layout.js";
import { setting } from "../../settings.js";

/** Firecracker's own default chroot base. */
export const DEFAULT_CHROOT_BASE = "/srv/jailer";
/** nobody/nogroup unless LOCALE2B_FIRECRACKER_UID / _GID say otherwise. */
const DEFAULT_ID = 65534;

export function jailRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  return setting("LOCALE2B_FIRECRACKER_JAILER", env) === "1";
}

function intEnv(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined || value === "") return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got '${value}'`);
  return n;
}

export function jailSpec(execFile: string, env: NodeJS.ProcessEnv = process.env): JailSpec {
  return {
    chrootBase: setting("LOCALE2B_FIRECRACKER_CHROOT_BASE", env) || DEFAULT_CHROOT_BASE,
    execFile,
    uid: intEnv(setting("LOCALE2B_FIRECRACKER_UID", env), DEFAULT_ID, "LOCALE2B_FIRECRACKER_UID"),
    gid: intEnv(setting("LOCALE2B_FIRECRACKER_GID", env), DEFAULT_ID, "LOCALE2B_FIRECRACKER_GID"),
  };
}

/**
 * Puts the kernel in the jail (a hard link, or a copy across filesystems;
 * none for a snapshot restore, which boots nothing)
 * and makes the jail's root and disk the jailed user's. Returns the kernel's
 * path as Firecracker sees it.
 */
export function prepareJail(layout: VmLayout, jail: JailSpec, kernel?: string): string {
  mkdirSync(layout.host("snapshotDir"), { recursive: true });
  mkdirSync(layout.host("captureDir"), { recursive: true });
  const inJail = layout.host("kernel");
  rmSync(inJail, { force: true });
  if (kernel) {
    try {
      linkSync(kernel, inJail);
    } catch {
      copyFileSync(kernel, inJail);
    }
  }
  for (const p of [layout.root, layout.host("rootfs"), layout.host("snapshotDir"), layout.host("captureDir")]) chownSync(p, jail.uid, jail.gid);
  return layout.vm("kernel");
}

/**
 * Removes what a previous jailer run left in the jail (device nodes, its
 * copy of the binary) so that a new one can set it up again (resume).
 */
export function resetJail(layout: VmLayout, jail: JailSpec): void {
  rmSync(join(layout.root, "dev"), { recursive: true, force: true });
  rmSync(join(layout.root, basename(jail.execFile)), { force: true });
}
