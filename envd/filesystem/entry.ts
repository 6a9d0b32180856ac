import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { constants, type BigIntStats } from "node:fs";
import { lstat, realpath, stat } from "node:fs/promises";
import { basename } from "node:path";
import { EntryInfoSchema, FileType, type EntryInfo } from "../../gen/ts/filesystem/filesystem_pb.js";
import type { UserDb } from "../users.js";
import { shown, utf8Path } from "./raw-names.js";
import { readMetadata } from "./xattr.js";

const { S_IFMT, S_IFREG, S_IFDIR, S_IFLNK, S_IFBLK, S_IFCHR, S_IFIFO, S_IFSOCK } = constants;
const S_ISUID = 0o4000;
const S_ISGID = 0o2000;
const S_ISVTX = 0o1000;

/** Type letters in the order Go's `FileMode.String()` prints them. */
const GO_MODE_LETTERS: [(mode: number) => boolean, string][] = [
  [(m) => (m & S_IFMT) === S_IFDIR, "d"],
  [(m) => (m & S_IFMT) === S_IFLNK, "L"],
  [(m) => (m & S_IFMT) === S_IFBLK || (m & S_IFMT) === S_IFCHR, "D"],
  [(m) => (m & S_IFMT) === S_IFIFO, "p"],
  [(m) => (m & S_IFMT) === S_IFSOCK, "S"],
  [(m) => (m & S_ISUID) !== 0, "u"],
  [(m) => (m & S_ISGID) !== 0, "g"],
  [(m) => (m & S_IFMT) === S_IFCHR, "c"],
  [(m) => (m & S_ISVTX) !== 0, "t"],
];

/**
 * A raw `st_mode` rendered exactly like Go's `os.FileMode.String()` of the
 * mode Go derives from it: `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`,
 * `dtrwxrwxrwx` (sticky), `Dcrw-rw-rw-` (char device), `urwxr-xr-x` (setuid).
 */
export function goFileModeString(mode: number): string {
  let out = "";
  for (const [test, letter] of GO_MODE_LETTERS) if (test(mode)) out += letter;
  if (out === "") out = "-";
  const rwx = "rwxrwxrwx";
  for (let i = 0; i < 9; i++) out += mode & (1 << (8 - i)) ? rwx[i] : "-";
  return out;
}

/** Regular files and directories have a type; everything else is unspecified. */
export function fileTypeOf(mode: number): FileType {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return FileType.FILE;
    case S_IFDIR:
      return FileType.DIRECTORY;
    default:
      return FileType.UNSPECIFIED;
  }
}

/** Nanoseconds since the epoch as a Timestamp (nanos always in [0, 1e9)). */
export function timestampFromNs(ns: bigint): Timestamp {
  let seconds = ns / 1_000_000_000n;
  let nanos = ns % 1_000_000_000n;
  if (nanos < 0n) {
    nanos += 1_000_000_000n;
    seconds -= 1n;
  }
  return create(TimestampSchema, { seconds, nanos: Number(nanos) });
}

export interface EntryOptions {
  /**
   * Path reported in `path` (ListDir reports paths under the requested,
   * unresolved directory; a Buffer path is reported as its UTF-8 text).
   */
  reportPath?: string;
  /** An lstat of `path` already at hand. */
  lstat?: BigIntStats;
}

/**
 * The EntryInfo of `path`, as envd builds it: lstat-based size, owner,
 * permissions and mtime; for a symlink `symlinkTarget` is the fully resolved
 * target and type/mode are the target's (a dangling or cyclic link keeps its
 * own path as target and has type UNSPECIFIED, mode 0). Throws the lstat error
 * (ENOENT, …) for the caller to map. `path` may be a Buffer (a name that is
 * not UTF-8); names and targets are then reported with U+FFFD.
 */
export async function buildEntry(users: UserDb, path: string | Buffer, opts: EntryOptions = {}): Promise<EntryInfo> {
  const st = opts.lstat ?? (await lstat(path, { bigint: true }));
  const rawMode = Number(st.mode);
  let type = fileTypeOf(rawMode);
  let mode = rawMode & 0o777;
  let symlinkTarget: string | undefined;
  if ((rawMode & S_IFMT) === S_IFLNK) {
    const resolved = await realpath(path, { encoding: "buffer" }).catch(() => undefined);
    symlinkTarget = shown(resolved ?? path);
    const target = await stat(resolved ?? path).catch(() => undefined);
    type = target ? fileTypeOf(target.mode) : FileType.UNSPECIFIED;
    mode = target ? target.mode & 0o777 : 0;
  }
  // The xattr library takes string paths only: a name that is not UTF-8 has no metadata to show.
  const textPath = typeof path === "string" ? path : utf8Path(path);
  const metadata = textPath === undefined ? {} : await readMetadata(textPath).catch(() => ({}));
  const reportPath = opts.reportPath ?? shown(path);
  return create(EntryInfoSchema, {
    name: basename(reportPath) || reportPath,
    type,
    path: reportPath,
    size: st.size,
    mode,
    permissions: goFileModeString(rawMode),
    owner: users.userName(Number(st.uid)),
    group: users.groupName(Number(st.gid)),
    modifiedTime: timestampFromNs(st.mtimeNs),
    symlinkTarget,
    metadata,
  });
}
