// The files API acts as the requesting user: envd runs as root (of its
// sandbox or VM), so before it touches a path for another user it checks
// what the kernel would let that user do. POSIX permission bits, the user's
// primary and supplementary groups, search permission on every directory on
// the way, the sticky bit of the parent for removal. (ACLs are not read.)
// A refusal is `permission_denied` (Connect) or 403 (HTTP), with a message
// naming the user, the path and what was refused.
import { lstatSync, readdirSync, readlinkSync, realpathSync, statSync, type Stats } from "node:fs";
import { dirname, resolve } from "node:path";
import type { User, UserDb } from "../users.js";

export type Want = "read" | "write" | "list" | "search";

/** A refused access; the API layers map it to their own shape. */
export class AccessDenied extends Error {
  constructor(readonly user: string, readonly path: string, readonly what: string) {
    super(`permission denied: user '${user}' cannot ${what} '${path}'`);
    this.name = "AccessDenied";
  }
}

const R = 4;
const W = 2;
const X = 1;

/** Only root envd acts for other users: as anyone else the kernel already checks everything envd does. */
function enforced(user: User): boolean {
  return process.getuid?.() === 0 && user.uid !== 0;
}

function allows(st: Stats, user: User, groups: Set<number>, bits: number): boolean {
  let m: number;
  if (st.uid === user.uid) m = (st.mode >> 6) & 7;
  else if (groups.has(st.gid)) m = (st.mode >> 3) & 7;
  else m = st.mode & 7;
  return (m & bits) === bits;
}

function statOrUndefined(path: string, follow = true): Stats | undefined {
  try {
    return follow ? statSync(path) : lstatSync(path);
  } catch {
    return undefined;
  }
}

/** The real path of the deepest part of `path` that exists (symlinks resolved), and how much is left. */
function existingPart(path: string): string {
  for (let p = path; ; p = dirname(p)) {
    try {
      return realpathSync(p);
    } catch {
      if (p === "/" || p === ".") return "/";
    }
  }
}

export class FsAccess {
  constructor(private readonly users: UserDb) {}

  private groups(user: User): Set<number> {
    return new Set([user.gid, ...this.users.groupsOf(user.name)]);
  }

  /** Search (x) on every directory from `/` down to and including `dir` (a real path). */
  private traverse(dir: string, user: User, groups: Set<number>, shown: string): void {
    const parts = dir.split("/").filter(Boolean);
    let p = "";
    for (let i = 0; i <= parts.length; i++) {
      p = i === 0 ? "/" : `${p === "/" ? "" : p}/${parts[i - 1]}`;
      const st = statOrUndefined(p);
      if (st?.isDirectory() && !allows(st, user, groups, X)) throw new AccessDenied(user.name, shown, `reach (no search permission on '${p}')`);
    }
  }

  /**
   * Throws AccessDenied when `user` may not `want` `path`:
   *   read   open the file (or directory) for reading
   *   write  open it for writing, or create it (and its missing parents)
   *   list   read a directory's entries
   *   search reach it at all (stat, watch its parent's view)
   * A path that does not exist is left for the operation to report.
   */
  check(user: User, path: string, want: Want, depth = 0): void {
    if (!enforced(user)) return;
    const groups = this.groups(user);
    const st = statOrUndefined(path);
    const link = st ? undefined : statOrUndefined(path, false);
    if (link?.isSymbolicLink() && depth < 40) {
      // A dangling symlink: writing it creates its target, which is what must be allowed.
      this.traverse(existingPart(dirname(path)), user, groups, path);
      this.check(user, resolve(dirname(path), readlinkSync(path)), want, depth + 1);
      return;
    }
    if (!st) {
      if (want !== "write") {
        this.traverse(existingPart(dirname(path)), user, groups, path);
        return;
      }
      // Creating: the deepest existing ancestor must take new entries.
      const parent = existingPart(dirname(path));
      this.traverse(parent, user, groups, path);
      const pst = statOrUndefined(parent);
      if (pst && !allows(pst, user, groups, W | X)) throw new AccessDenied(user.name, path, `create (no write permission on '${parent}')`);
      return;
    }
    const real = existingPart(path);
    this.traverse(st.isDirectory() ? real : dirname(real), user, groups, path);
    // Writing over a directory fails on its own terms (it is a directory), whoever asks.
    if (want === "write" && st.isDirectory()) return;
    if (want === "read" && !allows(st, user, groups, R)) throw new AccessDenied(user.name, path, "read");
    if (want === "write" && !allows(st, user, groups, W)) throw new AccessDenied(user.name, path, "write");
    if (want === "list" && !allows(st, user, groups, st.isDirectory() ? R | X : R)) throw new AccessDenied(user.name, path, "list");
  }

  /** Removing (or renaming away) `path`: write and search on its directory, and the sticky bit's owner rule. */
  checkRemove(user: User, path: string): void {
    if (!enforced(user)) return;
    const groups = this.groups(user);
    const own = statOrUndefined(path, false);
    if (!own) return;
    const parent = existingPart(dirname(path));
    this.traverse(parent, user, groups, path);
    const pst = statOrUndefined(parent);
    if (!pst) return;
    if (!allows(pst, user, groups, W | X)) throw new AccessDenied(user.name, path, `remove (no write permission on '${parent}')`);
    if (pst.mode & 0o1000 && own.uid !== user.uid && pst.uid !== user.uid) {
      throw new AccessDenied(user.name, path, `remove (its directory '${parent}' is sticky and the file is not theirs)`);
    }
    // A directory tree goes only if every directory in it may be emptied.
    if (own.isDirectory()) this.checkTree(user, groups, path);
  }

  private checkTree(user: User, groups: Set<number>, dir: string): void {
    const st = statOrUndefined(dir, false);
    if (!st?.isDirectory()) return;
    if (!allows(st, user, groups, R | W | X)) throw new AccessDenied(user.name, dir, "remove the contents of");
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const n of names) this.checkTree(user, groups, `${dir}/${n}`);
  }
}

