import { Code, ConnectError } from "@connectrpc/connect";
import type { Dirent } from "node:fs";
import { chmod, chown, lstat, mkdir, readdir, realpath, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { EntryInfo } from "../../gen/ts/filesystem/filesystem_pb.js";
import type { User, UserDb } from "../users.js";
import { buildEntry } from "./entry.js";
import { errnoOf, internal } from "./errors.js";
import { shown } from "./raw-names.js";
import { withDirLock } from "./dir-lock.js";

/** How many entries of one directory are described concurrently. */
const ENTRY_CONCURRENCY = 32;

const SLASH = Buffer.from("/");

/** `dir/name` of raw (Buffer) names. */
function child(dir: Buffer, name: Buffer): Buffer {
  return dir.length > 0 && dir[dir.length - 1] === SLASH[0] ? Buffer.concat([dir, name]) : Buffer.concat([dir, SLASH, name]);
}

/**
 * ListDir: the entries under `requested` down to `depth` levels (0 means 1),
 * in lexical depth-first order, not following symlinks inside the tree. A
 * symlink to a directory may be listed; paths are reported under the
 * requested path, not the resolved one. Names that are not valid UTF-8 are
 * listed too (with U+FFFD), as E2B's envd does: nothing hides from a client.
 */
export async function listDir(users: UserDb, requested: string, depth: number): Promise<EntryInfo[]> {
  const maxDepth = depth === 0 ? 1 : depth;
  let resolved: string;
  try {
    resolved = await realpath(requested);
  } catch (err) {
    switch (errnoOf(err)) {
      case "ENOENT":
        throw new ConnectError(`directory not found: ${requested}`, Code.NotFound);
      case "ELOOP":
        throw new ConnectError(`cyclic symlink or chain of too many links at ${requested}`, Code.FailedPrecondition);
      case "ENOTDIR":
        throw new ConnectError(`path is not a directory: a parent of ${requested} is a file`, Code.InvalidArgument);
      default:
        throw internal(`error resolving ${requested}`, err);
    }
  }
  let st;
  try {
    st = await stat(resolved);
  } catch (err) {
    if (errnoOf(err) === "ENOENT") throw new ConnectError(`directory not found: ${requested}`, Code.NotFound);
    throw internal(`error getting file info of ${requested}`, err);
  }
  if (!st.isDirectory()) throw new ConnectError(`path is not a directory: ${requested}`, Code.InvalidArgument);

  const out: EntryInfo[] = [];
  await walk(users, Buffer.from(resolved), requested, 1, maxDepth, out);
  return out;
}

async function walk(users: UserDb, dir: Buffer, reportDir: string, level: number, maxDepth: number, out: EntryInfo[]): Promise<void> {
  let dirents: Dirent<Buffer>[];
  try {
    dirents = await readdir(dir, { withFileTypes: true, encoding: "buffer" });
  } catch (err) {
    // A directory that vanished (or was replaced by a file) mid-walk is skipped.
    if (level > 1 && (errnoOf(err) === "ENOENT" || errnoOf(err) === "ENOTDIR")) return;
    throw internal(`error reading directory ${reportDir}`, err);
  }
  // Go's lexical order: bytewise on the names.
  dirents.sort((a, b) => Buffer.compare(a.name, b.name));
  for (let i = 0; i < dirents.length; i += ENTRY_CONCURRENCY) {
    const chunk = dirents.slice(i, i + ENTRY_CONCURRENCY);
    const entries = await Promise.all(chunk.map((d) => describeChild(users, child(dir, d.name), join(reportDir, shown(d.name)))));
    for (let j = 0; j < chunk.length; j++) {
      const entry = entries[j];
      if (!entry) continue; // vanished mid-walk
      out.push(entry);
      // Only real directories are descended into (symlinks are not followed).
      if (chunk[j]!.isDirectory() && level < maxDepth) {
        await walk(users, child(dir, chunk[j]!.name), join(reportDir, shown(chunk[j]!.name)), level + 1, maxDepth, out);
      }
    }
  }
}

async function describeChild(users: UserDb, path: Buffer, reportPath: string): Promise<EntryInfo | undefined> {
  try {
    return await buildEntry(users, path, { reportPath });
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return undefined;
    throw internal(`error reading directory entry ${reportPath}`, err);
  }
}

/**
 * Creates `path` and every missing parent as 0755 directories owned by
 * `user` (when envd runs as root). Existing directories are left alone; a
 * file in the way is an error.
 */
export function ensureDirs(path: string, user: User): Promise<void> {
  return withDirLock(() => ensureDirsLocked(path, user));
}

async function ensureDirsLocked(path: string, user: User): Promise<void> {
  const missing: string[] = [];
  let cur = path;
  for (;;) {
    try {
      const st = await stat(cur);
      if (!st.isDirectory()) {
        throw new ConnectError(`cannot create directory ${path}: ${cur} is a file`, Code.Internal);
      }
      break;
    } catch (err) {
      if (err instanceof ConnectError) throw err;
      if (errnoOf(err) !== "ENOENT") throw internal(`cannot create directory ${path}`, err);
      missing.push(cur);
      const parent = dirname(cur);
      if (parent === cur) break;
      cur = parent;
    }
  }
  const asRoot = process.getuid?.() === 0;
  for (const dir of missing.reverse()) {
    try {
      await mkdir(dir, { mode: 0o755 });
    } catch (err) {
      // Somebody else created it meanwhile: fine as long as it is a directory.
      if (errnoOf(err) === "EEXIST" && (await lstat(dir).then((s) => s.isDirectory(), () => false))) continue;
      throw internal(`failed to create directory ${dir}`, err);
    }
    try {
      await chmod(dir, 0o755);
      if (asRoot) await chown(dir, user.uid, user.gid);
    } catch (err) {
      throw internal(`failed to set owner of directory ${dir}`, err);
    }
  }
}

/** MakeDir: creates the directory and its parents; an existing one is `already_exists`. */
export async function makeDir(users: UserDb, path: string, user: User): Promise<EntryInfo> {
  try {
    const st = await stat(path);
    if (st.isDirectory()) throw new ConnectError(`directory already exists: ${path}`, Code.AlreadyExists);
    throw new ConnectError(`path already exists but it is not a directory: ${path}`, Code.InvalidArgument);
  } catch (err) {
    if (err instanceof ConnectError) throw err;
    if (errnoOf(err) !== "ENOENT") {
      if (errnoOf(err) === "ENOTDIR") {
        throw new ConnectError(`cannot create directory ${path}: one of its parents is a file`, Code.Internal);
      }
      throw internal(`error getting file info of ${path}`, err);
    }
  }
  await ensureDirs(path, user);
  try {
    return await buildEntry(users, path);
  } catch (err) {
    throw internal(`error getting file info of the new directory ${path}`, err);
  }
}
