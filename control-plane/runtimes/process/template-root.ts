import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GUEST } from "../../images/layout.js";
import type { LaunchOptions } from "./namespaces.js";
import { shq } from "./namespaces.js";
import type { SandboxLayout } from "./sandbox-fs.js";

/** Where the host's sandbox dir shows inside a template root (envd's hybrid-vsock socket is there). */
export const HOST_DIR_INSIDE = "/run/locale2b-host";

/** A sandbox's extra dirs when it runs on a template's root filesystem. */
export function templateDirs(layout: SandboxLayout): { upper: string; work: string; mnt: string; dev: string } {
  return { upper: join(layout.dir, "upper"), work: join(layout.dir, "work"), mnt: join(layout.dir, "mnt"), dev: join(layout.dir, "dev") };
}

/** The host's device nodes a sandbox gets (bound one by one: never the host's whole /dev). */
const DEVICES = ["null", "zero", "full", "random", "urandom", "tty"];

/**
 * The sandbox's dirs, and its /dev skeleton: empty files the device nodes and
 * the new devpts' ptmx are bound onto, the usual symlinks, pts/ and shm/.
 */
export function prepareTemplateDirs(layout: SandboxLayout): void {
  const d = templateDirs(layout);
  for (const dir of [d.upper, d.work, d.mnt, d.dev, join(d.dev, "pts"), join(d.dev, "shm")]) mkdirSync(dir, { recursive: true, mode: 0o755 });
  for (const name of [...DEVICES, "ptmx"]) writeFileSync(join(d.dev, name), "", { flag: "a" });
  const links: [string, string][] = [["fd", "/proc/self/fd"], ["stdin", "/proc/self/fd/0"], ["stdout", "/proc/self/fd/1"], ["stderr", "/proc/self/fd/2"]];
  for (const [name, target] of links) {
    try {
      symlinkSync(target, join(d.dev, name));
    } catch {
      // already there (a resumed or re-created sandbox)
    }
  }
}

function fstabEscape(s: string): string {
  return s.replace(/[\\ \t\n,]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, "0")}`);
}

/**
 * The mounts that make a template's rootfs the sandbox's whole filesystem,
 * as a VM sees its disk: an overlay (the template read-only below, the
 * sandbox's own writes above, so the image is shared and never changed),
 * /proc, a /dev with only the harmless host devices, its own devpts and
 * /dev/shm, /sys read-only, a /run tmpfs, the host's resolv.conf, and the
 * sandbox dir at HOST_DIR_INSIDE.
 * The set-up then pivots into it: nothing of the host's filesystem is left.
 */
export function buildTemplateFstab(layout: SandboxLayout, rootfsDir: string): string {
  const { upper, work, mnt, dev } = templateDirs(layout);
  const rows: [string, string, string, string][] = [
    ["l2b-root", mnt, "overlay", `lowerdir=${rootfsDir},upperdir=${upper},workdir=${work}`],
    ["proc", `${mnt}/proc`, "proc", "nosuid,nodev,noexec"],
    [dev, `${mnt}/dev`, "none", "bind"],
    ...DEVICES.map((name): [string, string, string, string] => [`/dev/${name}`, `${mnt}/dev/${name}`, "none", "bind"]),
    ["l2b-pts", `${mnt}/dev/pts`, "devpts", "newinstance,ptmxmode=0666,mode=0620,gid=5"],
    [`${mnt}/dev/pts/ptmx`, `${mnt}/dev/ptmx`, "none", "bind"],
    ["l2b-shm", `${mnt}/dev/shm`, "tmpfs", "mode=1777,nosuid,nodev"],
    ["sysfs", `${mnt}/sys`, "sysfs", "ro,nosuid,nodev,noexec"],
    ["l2b-run", `${mnt}/run`, "tmpfs", "mode=0755,nosuid,nodev"],
    [layout.dir, `${mnt}${HOST_DIR_INSIDE}`, "none", "bind,X-mount.mkdir"],
    ["/etc/resolv.conf", `${mnt}/etc/resolv.conf`, "none", "bind,ro"],
  ];
  // The overlay's options are one field: its paths must not need escaping beyond fstab's own.
  return rows.map((r) => `${r.map((f, i) => (i === 3 ? f : fstabEscape(f))).join(" ")} 0 0`).join("\n") + "\n";
}

/**
 * The namespace's first process for a template root: mount the root, pivot
 * into it, drop the host's filesystem, then exec the image's own init
 * (GUEST.init) in process mode: it starts the image's envd and serves the
 * hybrid-vsock handshake on the sandbox's socket, and as pid 1 reaps orphans.
 */
export function templateSetupScript(o: LaunchOptions, rootfsDir: string): string {
  const { mnt } = templateDirs(o.layout);
  const id = shq(o.sandboxId);
  const mount = shq(o.bin.mount);
  const s = [
    `fail() { echo "locale2b sandbox set-up: $*" >&2; exit 1; }`,
    `[ -x ${shq(join(rootfsDir, GUEST.init.slice(1)))} ] || fail "the template has no ${GUEST.init}: rebuild it (locale2b template build)"`,
    `${mount} --no-canonicalize -a -T ${shq(o.layout.fstab)} || fail "mounting the template's root filesystem failed"`,
    `cd ${shq(mnt)} || fail "no root mount"`,
    `mkdir -p .l2b-old && pivot_root . .l2b-old || fail "pivot_root into the template's root failed"`,
    `cd /`,
    `umount -l /.l2b-old && rmdir /.l2b-old || fail "cannot detach the host's filesystem"`,
    `echo ${id} > /proc/sys/kernel/hostname 2>/dev/null || true`,
  ];
  if (o.isolateNet) s.push(`ip link set lo up 2>/dev/null || true`);
  // User ports are forwarded only where the sandbox has its own network (its 127.0.0.1 is not the host's).
  const forward = o.isolateNet ? " --forward-ports" : "";
  s.push(`exec ${shq(GUEST.init)} --hybrid-listen ${shq(`${HOST_DIR_INSIDE}/envd.sock`)} --no-mounts --hostname ${id}${forward}`);
  return s.join("\n");
}
