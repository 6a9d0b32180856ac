import { basename, dirname } from "node:path";
import type { SandboxLayout } from "./sandbox-fs.js";

/**
 * How a sandbox is isolated:
 *   sandbox the control plane runs as root: a container-grade sandbox on its template's root
 *           filesystem (user, mount, pid, uts, ipc, net and cgroup namespaces, root inside mapped
 *           to an unprivileged host id, seccomp, its own disk), started by the launcher
 *           (launcher.ts, rootfs/init/sandbox.c)
 *   userns  an ordinary user with user namespaces: mount, pid, uts and ipc namespaces inside a
 *           user namespace on the host's filesystem (read-only but for the sandbox's own
 *           directories), envd running as `user` (our own uid, mapped); this file builds that
 *   none    no namespaces at all: envd runs as the control plane's user, seeing the host
 */
export type IsolationMode = "sandbox" | "userns" | "none";

export interface LaunchOptions {
  mode: Exclude<IsolationMode, "sandbox">;
  sandboxId: string;
  layout: SandboxLayout;
  /** Absolute paths of util-linux `unshare` and `mount` (and iproute2 `ip`, optional). */
  bin: { unshare: string; mount: string; ip?: string };
  /** Own network namespace with only `lo` (no internet access). */
  isolateNet: boolean;
  /** Remount the host's filesystem read-only inside the sandbox (its private dirs stay writable). */
  readOnlyRoot: boolean;
  /** userns mode: the uid/gid envd runs as inside (`user`'s); undefined keeps it root in the namespace. */
  innerUser?: { uid: number; gid: number };
  /** cgroup.procs files the start-up shell joins before anything forks. */
  cgroupProcs: string[];
  /** Host paths the sandbox must still see (node, the locale2b package) even when under a hidden path. */
  keep: string[];
  /** What runs last, as the namespace's second process (envd). */
  command: string[];
}

export interface Launch {
  file: string;
  args: string[];
  /** The fstab the in-namespace set-up mounts (to write at layout.fstab); empty in mode none. */
  fstab: string;
}

/** Paths the sandbox gets its own copy of: nothing of the host's shows there. */
const PRIVATE_PATHS = ["/home", "/root", "/tmp"];
/** Never hidden wholesale: hiding one of these would break the sandbox. */
const SYSTEM_DIRS = new Set(["/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/tmp"]);

export function isUnder(path: string, base: string): boolean {
  return base === "/" || path === base || path.startsWith(`${base}/`);
}

/** POSIX shell single-quoting. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/** fstab fields escape whitespace and backslashes in octal. */
function fstabEscape(s: string): string {
  return s.replace(/[\\ \t\n]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, "0")}`);
}

/**
 * What to hide so a sandbox cannot see other sandboxes or the control
 * plane's state: the data dir (parent of `sandboxes/`) when it is safe to
 * cover, else the folder holding the sandbox dirs; undefined when that
 * would cover a system directory.
 */
export function hiddenDataRoot(dir: string): string | undefined {
  const parent = dirname(dir);
  const dataDir = basename(parent) === "sandboxes" ? dirname(parent) : parent;
  if (!SYSTEM_DIRS.has(dataDir)) return dataDir;
  return SYSTEM_DIRS.has(parent) ? undefined : parent;
}

/**
 * The mounts made inside the sandbox's mount namespace, in order, as one
 * fstab for a single `mount -a` (one process instead of one per mount).
 * Sources go through /proc/self/fd/3 (the sandbox dir, opened before
 * anything is covered) and /proc/self/fd/4… (the `keep` paths), so they
 * resolve even once their host paths are hidden:
 *
 *   /home        tmpfs, so no host user's or other sandbox's home shows
 *   /home/user   ← <dir>/home
 *   /root        ← <dir>/root
 *   /tmp         ← <dir>/tmp (1777)
 *   /etc/passwd, /etc/group ← copies with `user` added
 *   /dev/shm     tmpfs (POSIX shared memory is not covered by the ipc namespace)
 *   <data dir>   tmpfs, hiding every sandbox and the control plane's store…
 *   <dir>        …then the sandbox's own dir bound back at the same path, so envd's socket
 *                (<dir>/envd.sock) is the very file the host dials. When the data dir is
 *                under /tmp or /home the private mounts already hide it and only the bind
 *                back is needed (its mountpoint is created inside the private dir).
 *   keep paths   bound back read-only (node or the package under a hidden path, e.g. ~/.nvm)
 */
export function buildFstab(layout: SandboxLayout, keep: string[]): string {
  const fd3 = "/proc/self/fd/3";
  const rows: [string, string, string, string][] = [
    ["l2b-home", "/home", "tmpfs", "mode=0755,size=16m,nosuid,nodev"],
    [`${fd3}/home`, "/home/user", "none", "bind,X-mount.mkdir"],
    [`${fd3}/root`, "/root", "none", "bind,X-mount.mkdir"],
    [`${fd3}/tmp`, "/tmp", "none", "bind,X-mount.mkdir"],
    [`${fd3}/etc/passwd`, "/etc/passwd", "none", "bind"],
    [`${fd3}/etc/group`, "/etc/group", "none", "bind"],
    ["l2b-shm", "/dev/shm", "tmpfs", "mode=1777,nosuid,nodev"],
  ];
  const hidden = hiddenDataRoot(layout.dir);
  if (hidden && !PRIVATE_PATHS.some((p) => isUnder(hidden, p))) rows.push(["l2b-data", hidden, "tmpfs", "mode=0755,size=1m"]);
  rows.push([fd3, layout.dir, "none", "bind,X-mount.mkdir"]);
  keep.forEach((path, i) => rows.push([`/proc/self/fd/${4 + i}`, path, "none", "bind,ro,X-mount.mkdir"]));
  return rows.map((r) => `${r.map(fstabEscape).join(" ")} 0 0`).join("\n") + "\n";
}

/** The keep paths that the sandbox's mounts would otherwise hide. */
export function pathsToKeep(layout: SandboxLayout, candidates: string[]): string[] {
  const hidden = hiddenDataRoot(layout.dir);
  const covered = [...PRIVATE_PATHS, ...(hidden ? [hidden] : [])];
  return [...new Set(candidates)].filter((p) => !isUnder(p, layout.dir) && covered.some((c) => isUnder(p, c)));
}

/** unshare's options for a mode. `--kill-child`: if unshare dies, the namespace's init dies with it. */
export function unshareFlags(isolateNet: boolean): string[] {
  const flags = ["--user", "--map-root-user"];
  flags.push("--mount", "--pid", "--fork", "--uts", "--ipc", "--mount-proc", "--propagation", "private", "--kill-child");
  if (isolateNet) flags.push("--net");
  return flags;
}

/**
 * The script unshare runs as the namespace's pid 1: mount the sandbox's
 * view, name the host, then run envd as a child (not exec'd: this shell
 * stays pid 1 and reaps orphaned processes, as an init must) and exit with
 * its status, which takes the whole namespace down.
 */
export function setupScript(o: LaunchOptions): string {
  const keepFds = o.keep.map((p, i) => ` ${4 + i}<${shq(p)}`).join("");
  const closeFds = ["3", ...o.keep.map((_, i) => String(4 + i))].map((fd) => ` ${fd}<&-`).join("");
  const id = shq(o.sandboxId);
  const s = [
    `fail() { echo "locale2b sandbox set-up: $*" >&2; exit 1; }`,
    `exec 3<${shq(o.layout.dir)}${keepFds} || fail "cannot open the sandbox directory"`,
    `${shq(o.bin.mount)} --no-canonicalize -a -T /proc/self/fd/3/fstab || fail "mounting the sandbox's private directories failed"`,
    `exec${closeFds}`,
  ];
  if (o.readOnlyRoot) s.push(`${shq(o.bin.mount)} -o remount,bind,ro / || fail "cannot make the host filesystem read-only"`);
  s.push(`echo ${id} > /proc/sys/kernel/hostname 2>/dev/null || hostname ${id} 2>/dev/null || true`);
  if (o.isolateNet && o.bin.ip) s.push(`${shq(o.bin.ip)} link set lo up 2>/dev/null || true`);
  s.push("cd /");
  const run =
    o.mode === "userns" && o.innerUser
      ? `${shq(o.bin.unshare)} --user --map-user=${o.innerUser.uid} --map-group=${o.innerUser.gid} -- "$@"`
      : `"$@"`;
  s.push(run, "exit $?");
  return s.join("\n");
}

/**
 * The whole start-up as one spawn: `/bin/sh` joins the sandbox's cgroups
 * (so everything after, unshare's fork included, is accounted there), then
 * execs unshare, which forks the namespace's init running setupScript().
 * Processes: sh→unshare (one pid), the init shell, mount, envd.
 */
export function buildLaunch(o: LaunchOptions): Launch {
  const join = o.cgroupProcs.map((f) => `echo $$ > ${shq(f)}`).join(" && ");
  const outer = `${join ? `{ ${join}; } || { echo "locale2b: cannot enter the sandbox's cgroup" >&2; exit 97; }\n` : ""}exec "$@"`;
  const tag = `locale2b-sandbox:${o.sandboxId}`;
  if (o.mode === "none") return { file: "/bin/sh", args: ["-c", outer, tag, ...o.command], fstab: "" };
  const inner = [o.bin.unshare, ...unshareFlags(o.isolateNet), "--", "/bin/sh", "-c", setupScript(o), tag, ...o.command];
  return { file: "/bin/sh", args: ["-c", outer, tag, ...inner], fstab: buildFstab(o.layout, o.keep) };
}
