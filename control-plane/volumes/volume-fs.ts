// The volume file API's operations on a volume's root directory, as the
// host's root. Sandboxes write into the same tree, so every path is resolved
// the way openat(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS would: one
// component at a time from a descriptor of the directory above it
// (`/proc/self/fd/<fd>/<name>`: the magic link is the open directory itself,
// never a path looked up again), each opened O_NOFOLLOW, `..` refused before
// anything is opened. A symlink a sandbox plants (or swaps in between two
// calls) is never followed, so no request reaches outside the volume; the
// volume being a file system of its own, hard links cannot either.
import { constants, type Stats } from "node:fs";
import { randomBytes } from "node:crypto";
import { lstat, mkdir, open, readdir, readlink, rename, rmdir, unlink, type FileHandle } from "node:fs/promises";
import type { Readable } from "node:stream";
import { ControlPlaneError } from "../domain/errors.js";
import { at, display, fsError, invalid, pathParts, symlinkOr } from "./volume-paths.js";

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;

/** The ids the API takes and shows are the sandbox's (0-65535); on the host they are shifted by `base`. */
export interface VolumeIds {
  base: number;
  count: number;
}

/** Owner, group and permission bits an API call may set (sandbox ids). */
export interface EntryAttrs {
  uid?: number;
  gid?: number;
  mode?: number;
}

/** E2B's VolumeEntryStat. */
export interface VolumeEntry {
  name: string;
  type: "file" | "directory" | "symlink" | "unknown";
  path: string;
  size: number;
  mode: number;
  uid: number;
  gid: number;
  atime: string;
  mtime: string;
  ctime: string;
  target?: string;
}

/** `user` in every sandbox: what new entries belong to unless a call says otherwise. */
export const DEFAULT_OWNER = 1000;
const MAX_DEPTH = 32;

/**
 * One volume's tree, for the file API. `root` is the volume's mounted root
 * directory; `name` is for messages.
 */
export class VolumeFs {
  constructor(
    private readonly root: string,
    private readonly name: string,
    private readonly ids: VolumeIds,
  ) {}

  private fail(err: unknown, parts: string[], what: string): Error {
    return fsError(err, parts, what, this.name);
  }

  private hostId(id: number | undefined, what: string): number | undefined {
    if (id === undefined) return undefined;
    if (!Number.isInteger(id) || id < 0 || id >= this.ids.count) throw invalid(`${what} ${id}: expected an id from 0 to ${this.ids.count - 1} (as inside a sandbox)`);
    return this.ids.base + id;
  }

  private sandboxId(id: number): number {
    const s = id - this.ids.base;
    return s >= 0 && s < this.ids.count ? s : 65534; // nobody, as a sandbox sees an unmapped id
  }

  private static checkMode(mode: number | undefined): number | undefined {
    if (mode === undefined) return undefined;
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw invalid(`mode ${mode}: expected permission bits from 0 to 0o7777 (e.g. 420 for 0644)`);
    return mode;
  }

  /** The directory `parts` names, opened without following any symlink; the caller closes it. */
  private async openDir(parts: string[]): Promise<FileHandle> {
    let dir = await open(this.root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    for (let i = 0; i < parts.length; i++) {
      let next: FileHandle;
      try {
        next = await open(at(dir, parts[i]!), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
      } catch (err) {
        const e = await symlinkOr(err, dir, parts[i]!);
        await dir.close();
        throw this.fail(e, parts.slice(0, i + 1), "opening");
      }
      await dir.close();
      dir = next;
    }
    return dir;
  }

  /** Makes each missing directory of `parts` (owned like `attrs`), returning the last one open. */
  private async makeDirs(parts: string[], attrs: EntryAttrs): Promise<FileHandle> {
    let dir = await open(this.root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    try {
      for (let i = 0; i < parts.length; i++) {
        const path = at(dir, parts[i]!);
        let made = false;
        try {
          await mkdir(path, 0o755);
          made = true;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw this.fail(err, parts.slice(0, i + 1), "making a directory");
        }
        let next: FileHandle;
        try {
          next = await open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        } catch (err) {
          throw this.fail(await symlinkOr(err, dir, parts[i]!), parts.slice(0, i + 1), "making a directory");
        }
        if (made) await this.own(next, attrs, 0o755).catch(async (err: unknown) => {
          await next.close();
          throw err;
        });
        await dir.close();
        dir = next;
      }
      return dir;
    } catch (err) {
      await dir.close().catch(() => undefined);
      throw err;
    }
  }

  private async own(h: FileHandle, attrs: EntryAttrs, defaultMode: number): Promise<void> {
    const uid = this.hostId(attrs.uid ?? DEFAULT_OWNER, "uid")!;
    const gid = this.hostId(attrs.gid ?? DEFAULT_OWNER, "gid")!;
    await h.chown(uid, gid);
    await h.chmod(VolumeFs.checkMode(attrs.mode) ?? defaultMode);
  }

  private entry(parts: string[], st: Stats, target?: string): VolumeEntry {
    const type = st.isFile() ? "file" : st.isDirectory() ? "directory" : st.isSymbolicLink() ? "symlink" : "unknown";
    return {
      name: parts.length ? parts[parts.length - 1]! : "",
      type,
      path: display(parts),
      size: st.size,
      mode: st.mode & 0o7777,
      uid: this.sandboxId(st.uid),
      gid: this.sandboxId(st.gid),
      atime: st.atime.toISOString(),
      mtime: st.mtime.toISOString(),
      ctime: st.ctime.toISOString(),
      ...(target !== undefined ? { target } : {}),
    };
  }

  /** lstat of `name` in an open directory, with a symlink's target (read, never followed). */
  private async entryAt(dir: FileHandle, parts: string[]): Promise<VolumeEntry> {
    const name = parts[parts.length - 1]!;
    const st = await lstat(at(dir, name));
    return this.entry(parts, st, st.isSymbolicLink() ? await readlink(at(dir, name)) : undefined);
  }

  async stat(path: string | null): Promise<VolumeEntry> {
    const parts = pathParts(path);
    if (parts.length === 0) {
      const root = await this.openDir([]);
      try {
        return this.entry([], await root.stat());
      } finally {
        await root.close();
      }
    }
    const dir = await this.openDir(parts.slice(0, -1));
    try {
      return await this.entryAt(dir, parts);
    } catch (err) {
      throw this.fail(err, parts, "reading");
    } finally {
      await dir.close();
    }
  }

  /** The entries under a directory, `depth` levels down (1: its own). */
  async list(path: string | null, depth = 1): Promise<VolumeEntry[]> {
    if (!Number.isInteger(depth) || depth < 1 || depth > MAX_DEPTH) throw invalid(`depth ${depth}: expected an integer from 1 to ${MAX_DEPTH}`);
    const parts = pathParts(path);
    const dir = await this.openDir(parts);
    const out: VolumeEntry[] = [];
    try {
      await this.walk(dir, parts, depth, out);
    } finally {
      await dir.close();
    }
    return out;
  }

  private async walk(dir: FileHandle, parts: string[], depth: number, out: VolumeEntry[]): Promise<void> {
    const names = (await readdir(`/proc/self/fd/${dir.fd}`)).sort();
    for (const name of names) {
      const child = [...parts, name];
      let e: VolumeEntry;
      try {
        e = await this.entryAt(dir, child);
      } catch {
        continue; // removed meanwhile (a sandbox works in the same tree)
      }
      out.push(e);
      if (e.type === "directory" && depth > 1) {
        const sub = await open(at(dir, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch(() => undefined);
        if (!sub) continue; // swapped for something else meanwhile: not followed
        try {
          await this.walk(sub, child, depth - 1, out);
        } finally {
          await sub.close();
        }
      }
    }
  }

  /** A directory; with `force` its missing parents too, and an existing one is fine. */
  async makeDir(path: string | null, attrs: EntryAttrs, force: boolean): Promise<VolumeEntry> {
    const parts = pathParts(path);
    if (parts.length === 0) throw invalid("path '/' is the volume's root: it exists");
    VolumeFs.checkMode(attrs.mode);
    if (force) {
      const made = await this.makeDirs(parts, attrs);
      await made.close();
      return this.stat(path);
    }
    const dir = await this.openDir(parts.slice(0, -1));
    try {
      const name = parts[parts.length - 1]!;
      try {
        await mkdir(at(dir, name), 0o755);
      } catch (err) {
        throw this.fail(err, parts, "making a directory");
      }
      const h = await open(at(dir, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch((err: unknown) => {
        throw this.fail(err, parts, "making a directory");
      });
      try {
        await this.own(h, attrs, 0o755);
      } finally {
        await h.close();
      }
      return await this.entryAt(dir, parts);
    } finally {
      await dir.close();
    }
  }

  /** A regular file's contents as a stream (the handle closes with it). */
  async read(path: string | null): Promise<{ size: number; stream: Readable }> {
    const parts = pathParts(path);
    if (parts.length === 0) throw invalid("path '/' is the volume's root directory: readFile needs a file");
    const dir = await this.openDir(parts.slice(0, -1));
    let h: FileHandle;
    try {
      h = await open(at(dir, parts[parts.length - 1]!), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    } catch (err) {
      throw this.fail(err, parts, "reading");
    } finally {
      await dir.close();
    }
    const st = await h.stat();
    if (!st.isFile()) {
      await h.close();
      throw invalid(`${display(parts)} is ${st.isDirectory() ? "a directory" : "not a regular file"}: readFile needs a file`);
    }
    return { size: st.size, stream: h.createReadStream({ autoClose: true }) };
  }

  /**
   * Writes `body` to a file (made with its missing parent directories, or
   * replaced). The bytes go to a new file beside it, renamed over the name
   * once all are written: a write that fails (the volume full, the client
   * gone) leaves nothing behind and the old file as it was, and a sandbox
   * reading the file meanwhile sees the old one or the new one, never half.
   */
  async write(path: string | null, body: Readable, attrs: EntryAttrs): Promise<VolumeEntry> {
    const parts = pathParts(path);
    if (parts.length === 0) throw invalid("path '/' is the volume's root directory: writeFile needs a file path");
    VolumeFs.checkMode(attrs.mode);
    this.hostId(attrs.uid, "uid");
    this.hostId(attrs.gid, "gid");
    const dir = await this.makeDirs(parts.slice(0, -1), {});
    const name = parts[parts.length - 1]!;
    const temp = `.locale2b-write-${randomBytes(8).toString("hex")}`;
    let made = false;
    try {
      const old = await this.existingFile(dir, name, parts);
      let h: FileHandle;
      try {
        h = await open(at(dir, temp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK, 0o644);
        made = true;
      } catch (err) {
        throw this.fail(err, parts, "writing");
      }
      try {
        // A new file gets what was asked (or user's defaults); a replaced one keeps its owner and mode unless asked
        // (less setuid and setgid, as a write by anyone but root clears them).
        await this.own(h, old ? { uid: attrs.uid ?? this.sandboxId(old.uid), gid: attrs.gid ?? this.sandboxId(old.gid), mode: attrs.mode ?? old.mode & 0o1777 } : attrs, 0o644);
        let offset = 0;
        for await (const chunk of body) {
          const buf = chunk as Buffer;
          for (let off = 0; off < buf.length; ) {
            const { bytesWritten } = await h.write(buf, off, buf.length - off, offset);
            off += bytesWritten;
            offset += bytesWritten;
          }
        }
        await h.datasync().catch(() => undefined);
      } catch (err) {
        throw err instanceof ControlPlaneError ? err : this.fail(err, parts, "writing");
      } finally {
        await h.close();
      }
      await rename(at(dir, temp), at(dir, name)).catch((err: unknown) => {
        throw this.fail(err, parts, "writing");
      });
      made = false;
      return await this.entryAt(dir, parts);
    } finally {
      if (made) await unlink(at(dir, temp)).catch(() => undefined);
      await dir.close();
    }
  }

  /** The regular file a write replaces (its owner and mode), undefined when there is none; refused when the name is something else. */
  private async existingFile(dir: FileHandle, name: string, parts: string[]): Promise<{ uid: number; gid: number; mode: number } | undefined> {
    let h: FileHandle;
    try {
      h = await open(at(dir, name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw this.fail(err, parts, "writing");
    }
    try {
      const st = await h.stat();
      if (!st.isFile()) throw invalid(`${display(parts)} is ${st.isDirectory() ? "a directory" : "not a regular file"}: writeFile needs a file path`);
      return { uid: st.uid, gid: st.gid, mode: st.mode };
    } finally {
      await h.close();
    }
  }

  /** Sets owner, group and mode (a symlink's cannot be set: refused). */
  async setAttrs(path: string | null, attrs: EntryAttrs): Promise<VolumeEntry> {
    const parts = pathParts(path);
    const mode = VolumeFs.checkMode(attrs.mode);
    const uid = this.hostId(attrs.uid, "uid");
    const gid = this.hostId(attrs.gid, "gid");
    const dir = await this.openDir(parts.slice(0, -1));
    try {
      const h = parts.length === 0 ? await this.openDir([]) : await open(at(dir, parts[parts.length - 1]!), O_RDONLY | O_NOFOLLOW | O_NONBLOCK).catch((err: unknown) => {
        throw this.fail(err, parts, "changing metadata of");
      });
      try {
        const st = await h.stat();
        if (uid !== undefined || gid !== undefined) await h.chown(uid ?? st.uid, gid ?? st.gid);
        if (mode !== undefined) await h.chmod(mode);
        return this.entry(parts, await h.stat());
      } finally {
        await h.close();
      }
    } finally {
      await dir.close();
    }
  }

  /** Removes a file, a symlink (not what it points to) or a directory with everything in it. */
  async remove(path: string | null): Promise<void> {
    const parts = pathParts(path);
    if (parts.length === 0) throw invalid("path '/' is the volume's root: remove what is in it, or destroy the volume");
    const dir = await this.openDir(parts.slice(0, -1));
    try {
      await this.removeAt(dir, parts[parts.length - 1]!, parts);
    } catch (err) {
      throw err instanceof ControlPlaneError ? err : this.fail(err, parts, "removing");
    } finally {
      await dir.close();
    }
  }

  private async removeAt(dir: FileHandle, name: string, parts: string[]): Promise<void> {
    const st = await lstat(at(dir, name));
    if (!st.isDirectory()) {
      await unlink(at(dir, name));
      return;
    }
    let sub: FileHandle;
    try {
      sub = await open(at(dir, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    } catch (err) {
      // Swapped for a symlink or a file since the lstat: that is what goes.
      if ((err as NodeJS.ErrnoException).code === "ELOOP" || (err as NodeJS.ErrnoException).code === "ENOTDIR") return unlink(at(dir, name));
      throw err;
    }
    try {
      for (const child of await readdir(`/proc/self/fd/${sub.fd}`)) {
        await this.removeAt(sub, child, [...parts, child]).catch((err: unknown) => {
          if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
        });
      }
    } finally {
      await sub.close();
    }
    await rmdir(at(dir, name));
  }
}
