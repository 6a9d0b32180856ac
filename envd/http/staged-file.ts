import { randomBytes } from "node:crypto";
import { accessSync, constants, createWriteStream, lstatSync, mkdirSync, readlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { chmod, chown, copyFile, mkdir, open, realpath, stat, unlink } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { dirname, join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { uploadEnded, uploadStarted } from "../filesystem/tree-watcher.js";
import { replaceMetadata } from "../filesystem/xattr.js";
import { withDirLock } from "../filesystem/dir-lock.js";
import type { User } from "../users.js";
import { errnoCode, HttpError, isRoot } from "./common.js";
import { receiveBody } from "./file-splice.js";
import { AccessDenied, FsAccess } from "../auth/fs-access.js";
import type { UserDb } from "../users.js";

const NEW_FILE_MODE = 0o644;
const NEW_DIR_MODE = 0o755;
/** Bytes an upload's file sink gathers before it pushes back on the request body. */
const SINK_BUFFER_BYTES = 2 * 1024 * 1024;

/**
 * Where replacements of existing files are received before they are copied
 * over the target: outside the user's directories, so watchers never see
 * the staging file.
 */
function stagingDir(): string {
  const candidates = process.env.LOCALE2B_ENVD_STAGING_DIR
    ? [process.env.LOCALE2B_ENVD_STAGING_DIR]
    : ["/var/tmp/.locale2b-envd-uploads", join(tmpdir(), ".locale2b-envd-uploads")];
  for (const dir of candidates) {
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      accessSync(dir, constants.W_OK);
      return dir;
    } catch {
      // read-only or missing: try the next one
    }
  }
  throw new Error(`no writable staging directory for uploads (tried ${candidates.join(", ")})`);
}

/**
 * One uploaded file on its way to disk, so that a failed, aborted or
 * truncated upload leaves no partial file and never damages an old one:
 * - a new file is written in place (as E2B's envd does: watchers see create
 *   + write of that very file) and removed again if the upload fails;
 * - an existing file is received into a staging file first and copied over
 *   the target in place only when complete (same inode: watchers see a
 *   write, hard links and open readers follow, as with E2B's envd).
 */
export class StagedFile {
  private committed = false;
  /** True once our exclusive create succeeded: only then is the file ours to remove. */
  private written = false;
  private sink: ReturnType<typeof createWriteStream> | undefined;
  /** Set when a write failed because its source stream failed first (not the disk). */
  sourceFailed = false;

  private constructor(
    /** The destination as requested (resolved, not following symlinks). */
    readonly path: string,
    /** Where the bytes really go: the symlink target when `path` is a symlink. */
    private readonly target: string,
    private readonly tmp: string,
    private readonly mode: number,
    private readonly user: User,
  ) {}

  /**
   * Checks the destination (a directory or a special file there is a 400),
   * creates missing parent directories owned by the user and picks the
   * temporary file's name. Nothing is written yet.
   */
  static create(path: string, user: User, users?: UserDb): Promise<StagedFile> {
    return withDirLock(() => StagedFile.createLocked(path, user, users));
  }

  private static async createLocked(path: string, user: User, users?: UserDb): Promise<StagedFile> {
    // The upload acts as its user: they must be able to write the file (or create it).
    if (users) {
      try {
        new FsAccess(users).check(user, path, "write");
      } catch (err) {
        if (err instanceof AccessDenied) throw new HttpError(403, err.message);
        throw err;
      }
    }
    let target = path;
    let mode = NEW_FILE_MODE;
    let exists = false;
    try {
      const info = await stat(path);
      if (info.isDirectory()) throw new HttpError(400, `path '${path}' is a directory`);
      if (!info.isFile()) throw new HttpError(400, `path '${path}' is not a regular file`);
      mode = info.mode & 0o7777;
      target = await realpath(path);
      exists = true;
    } catch (err) {
      if (err instanceof HttpError) throw err;
      const code = errnoCode(err);
      if (code === "ENOTDIR") throw new HttpError(400, `path '${path}' is invalid: a parent is not a directory`);
      if (code !== "ENOENT") throw err;
      // A dangling symlink: the upload creates its target (as open(2) with O_CREAT would).
      target = danglingTarget(path) ?? path;
    }
    const dir = dirname(target);
    await ensureDir(dir, user, path);
    const tmp = exists ? join(stagingDir(), `upload-${randomBytes(8).toString("hex")}`) : target;
    uploadStarted(target);
    return new StagedFile(path, target, tmp, mode, user);
  }

  /** Streams `source` into the temporary file with back-pressure. */
  async write(source: Readable): Promise<void> {
    if (source.destroyed) {
      this.sourceFailed = true;
      throw source.errored ?? new Error("the upload stream closed before it was written");
    }
    // A large high-water mark: while one write is on its way to disk, the chunks that arrive meanwhile
    // are gathered and go down in one writev.
    const sink = createWriteStream(this.tmp, { flags: "wx", mode: this.tmp === this.target ? this.mode : 0o600, highWaterMark: SINK_BUFFER_BYTES });
    sink.once("open", () => (this.written = true));
    this.sink = sink;
    let first: "source" | "sink" | undefined;
    source.once("error", () => (first ??= "source"));
    sink.once("error", () => (first ??= "sink"));
    try {
      await pipeline(source, sink);
    } catch (err) {
      this.sourceFailed = first === "source";
      throw err;
    }
  }

  /**
   * Writes a raw (identity) request body into the temporary file, straight
   * from the socket (file-splice.ts, file-receiver.ts): the fast path of
   * octet-stream uploads.
   */
  async receive(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const handle = await open(this.tmp, "wx", this.tmp === this.target ? this.mode : 0o600);
    this.written = true;
    try {
      await receiveBody(handle.fd, req, res);
    } finally {
      await handle.close().catch(() => undefined);
    }
  }

  /** Sets owner, mode and metadata; a staged replacement is copied over the target in place. */
  async commit(metadata: Record<string, string>): Promise<void> {
    if (isRoot()) await chown(this.tmp, this.user.uid, this.user.gid);
    await chmod(this.tmp, this.mode);
    if (this.tmp !== this.target) {
      // copyFile opens the target with O_TRUNC (same inode) and gives it the
      // staging file's mode, which chmod above set to the target's own.
      try {
        await copyFile(this.tmp, this.target);
      } catch (err) {
        const code = errnoCode(err);
        if (code === "EISDIR") throw new HttpError(400, `path '${this.path}' is a directory`);
        throw err;
      }
      await unlink(this.tmp).catch(() => undefined);
      if (isRoot()) await chown(this.target, this.user.uid, this.user.gid);
    }
    await replaceMetadata(this.target, metadata);
    uploadEnded(this.target, true);
    this.committed = true;
  }

  /** Removes what a failed upload wrote: the temporary file, or the new file itself. */
  async discard(): Promise<void> {
    if (this.committed) return;
    uploadEnded(this.target, false);
    // A failed pipeline may destroy the sink before its open completes: wait for it.
    if (this.sink && !this.sink.closed) await new Promise<void>((r) => this.sink!.once("close", () => r()));
    if (!this.written) return;
    await unlink(this.tmp).catch(() => undefined);
  }
}

/** Where a chain of symlinks that ends nowhere points, or undefined when `path` is no symlink. */
function danglingTarget(path: string): string | undefined {
  let p = path;
  for (let i = 0; i < 40; i++) {
    let link: string;
    try {
      if (!lstatSync(p).isSymbolicLink()) return p === path ? undefined : p;
      link = readlinkSync(p);
    } catch {
      return p === path ? undefined : p;
    }
    p = resolve(dirname(p), link);
  }
  throw new HttpError(400, `path '${path}' is a chain of too many symlinks`);
}

/** mkdir -p with 0755, chowning every directory it creates to `user` (when root). */
async function ensureDir(dir: string, user: User, forPath: string): Promise<void> {
  let first: string | undefined;
  try {
    first = await mkdir(dir, { recursive: true, mode: NEW_DIR_MODE });
  } catch (err) {
    const code = errnoCode(err);
    if (code === "EEXIST" || code === "ENOTDIR") {
      throw new HttpError(400, `error creating parent directories of '${forPath}': a path component is not a directory`);
    }
    throw err;
  }
  if (!first || !isRoot()) return;
  const created: string[] = [];
  for (let d = dir; ; d = dirname(d)) {
    created.push(d);
    if (d === first || dirname(d) === d) break;
  }
  for (const d of created.reverse()) await chown(d, user.uid, user.gid);
}
