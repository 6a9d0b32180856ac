import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

/** E2B's default user, as the process runtime creates it in every sandbox. */
export interface SandboxUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

export const SANDBOX_USER = "user";
export const SANDBOX_HOME = "/home/user";

/**
 * A sandbox's own files under its directory (spec.dir). In sandbox mode (as
 * root): disk.img (its writable layer), envd.sock, envd.log, and the mount
 * points disk/ and root/ the launcher uses in its own mount namespace. In
 * user-namespace mode (an ordinary user, on the host's filesystem):
 *   home/        → /home/user inside (owned by `user`)
 *   tmp/         → /tmp inside (mode 1777)
 *   root/        → /root inside
 *   etc/passwd, etc/group → bound over the host's, with `user` added
 *   fstab        → the mounts the in-namespace setup makes (namespaces.ts)
 *   envd.sock    → envd's hybrid-vsock socket; envd.log its output
 */
export interface SandboxLayout {
  dir: string;
  home: string;
  tmp: string;
  root: string;
  passwd: string;
  group: string;
  fstab: string;
  socket: string;
  log: string;
  disk: string;
}

export function sandboxLayout(relativeOrAbsolute: string): SandboxLayout {
  // Absolute: envd's listen URL and the in-namespace mounts need it.
  const dir = resolve(relativeOrAbsolute);
  return {
    dir,
    home: join(dir, "home"),
    tmp: join(dir, "tmp"),
    root: join(dir, "root"),
    passwd: join(dir, "etc", "passwd"),
    group: join(dir, "etc", "group"),
    fstab: join(dir, "fstab"),
    socket: join(dir, "envd.sock"),
    log: join(dir, "envd.log"),
    disk: join(dir, "disk.img"),
  };
}

function lines(text: string): string[] {
  return text.split("\n").filter((l) => l !== "");
}

function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return fallback;
  }
}

export interface UserFiles {
  user: SandboxUser;
  passwd: string;
  group: string;
}

let cached: { key: string; files: UserFiles } | undefined;

/**
 * Copies of the host's /etc/passwd and /etc/group with `user` added: uid
 * 1000, or the first uid ≥ 1000 that is free as a uid and a gid on the host,
 * so a sandbox's user owns nothing of the host's. A host account named
 * `user` is left out of the copy (its home is not the sandbox's).
 */
export function userFiles(etc = "/etc"): UserFiles {
  let key = "";
  try {
    key = `${etc}:${statSync(join(etc, "passwd")).mtimeMs}:${statSync(join(etc, "group")).mtimeMs}`;
  } catch {
    // missing files: build from nothing
  }
  if (cached && cached.key === key && key !== "") return cached.files;
  const passwd = lines(readOr(join(etc, "passwd"), "root:x:0:0:root:/root:/bin/sh\n"));
  const group = lines(readOr(join(etc, "group"), "root:x:0:\n"));
  const uids = new Set(passwd.map((l) => Number(l.split(":")[2])));
  const gids = new Set([...group.map((l) => Number(l.split(":")[2])), ...passwd.map((l) => Number(l.split(":")[3]))]);
  let id = 1000;
  while (uids.has(id) || gids.has(id)) id++;
  const shell = existsSync("/bin/bash") ? "/bin/bash" : "/bin/sh";
  const user: SandboxUser = { name: SANDBOX_USER, uid: id, gid: id, home: SANDBOX_HOME, shell };
  const notUser = (l: string) => !l.startsWith(`${SANDBOX_USER}:`);
  const files: UserFiles = {
    user,
    passwd: [...passwd.filter(notUser), `${SANDBOX_USER}:x:${id}:${id}::${SANDBOX_HOME}:${shell}`, ""].join("\n"),
    group: [...group.filter(notUser), `${SANDBOX_USER}:x:${id}:`, ""].join("\n"),
  };
  cached = { key, files };
  return files;
}

/**
 * Creates the sandbox's private directories and user files. `owner` is the
 * host uid/gid that should own home (root mode: `user`'s); without it (user
 * namespaces) everything stays ours and maps to `user` inside.
 */
export function prepareSandboxFs(layout: SandboxLayout, files: UserFiles, owner: { uid: number; gid: number } | undefined): void {
  // Only the control plane (and the sandbox, through its own mounts) may enter the sandbox's directory.
  mkdirSync(layout.dir, { recursive: true, mode: 0o700 });
  chmodSync(layout.dir, 0o700);
  mkdirSync(join(layout.dir, "etc"), { recursive: true });
  const freshHome = !existsSync(layout.home);
  mkdirSync(layout.home, { recursive: true, mode: 0o750 });
  mkdirSync(layout.tmp, { recursive: true });
  chmodSync(layout.tmp, 0o1777);
  mkdirSync(layout.root, { recursive: true, mode: 0o700 });
  writeFileSync(layout.passwd, files.passwd, { mode: 0o644 });
  writeFileSync(layout.group, files.group, { mode: 0o644 });
  if (freshHome) copySkeleton(layout.home, owner);
  if (owner) chownSync(layout.home, owner.uid, owner.gid);
}

/** /etc/skel's top-level files (.bashrc, .profile, ...) into a new home, as useradd does. */
function copySkeleton(home: string, owner: { uid: number; gid: number } | undefined): void {
  let names: string[];
  try {
    names = readdirSync("/etc/skel");
  } catch {
    return;
  }
  for (const name of names) {
    const src = join("/etc/skel", name);
    try {
      if (!statSync(src).isFile()) continue;
      const dst = join(home, name);
      copyFileSync(src, dst);
      if (owner) chownSync(dst, owner.uid, owner.gid);
    } catch {
      // best effort: a missing skeleton file is not worth failing a sandbox over
    }
  }
}

/** Removes the sandbox's directory and everything in it. */
export function removeSandboxFs(layout: SandboxLayout): void {
  rmSync(layout.dir, { recursive: true, force: true });
}
