// Paths and errors of the volume file API: a request's path checked and cut
// into components under the volume's root (never resolved: '..' and NUL are
// refused), the magic-link path of a name in an open directory, and an errno
// turned into the API's words and status (404, 409, 400, 507).
import { lstat, type FileHandle } from "node:fs/promises";
import { ControlPlaneError } from "../domain/errors.js";

const MAX_PATH = 4096;

export function invalid(message: string): ControlPlaneError {
  return new ControlPlaneError("invalid", message);
}

/**
 * A request's path as components under the volume's root. Absolute or
 * relative, both from the volume's root; '.' and empty components are
 * dropped; '..' and NUL are refused (400), never resolved.
 */
export function pathParts(path: string | null | undefined): string[] {
  if (path === null || path === undefined) throw invalid("query parameter 'path' is required: a path inside the volume, e.g. /data/file.txt");
  if (path.includes("\0")) throw invalid("path must not contain NUL");
  if (path.length > MAX_PATH) throw invalid(`path is ${path.length} characters long: at most ${MAX_PATH}`);
  const parts = path.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw invalid(`path '${path}' contains '..': paths are inside the volume, from its root`);
  if (parts.some((p) => Buffer.byteLength(p) > 255)) throw invalid("a path component is longer than 255 bytes");
  return parts;
}

export const at = (dir: FileHandle, name: string) => `/proc/self/fd/${dir.fd}/${name}`;

/** O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR: say ELOOP (a symlink) when that is what it is. */
export async function symlinkOr(err: unknown, dir: FileHandle, name: string): Promise<unknown> {
  if ((err as NodeJS.ErrnoException).code !== "ENOTDIR") return err;
  const st = await lstat(at(dir, name)).catch(() => undefined);
  return st?.isSymbolicLink() ? Object.assign(new Error("symlink"), { code: "ELOOP" }) : err;
}
export const display = (parts: string[]) => `/${parts.join("/")}`;

/** An errno turned into the API's words (and status: 404, 409, 400, 507). */
export function fsError(err: unknown, parts: string[], what: string, volume: string): Error {
  const code = (err as NodeJS.ErrnoException).code;
  const p = display(parts);
  switch (code) {
    case "ENOENT":
      return new ControlPlaneError("not_found", `${p} not found in volume '${volume}'`);
    case "ELOOP":
      return invalid(`${p}: a symlink on the way (the volume API does not follow symlinks; use the link's target path)`);
    case "ENOTDIR":
      return invalid(`${p}: a part of it is not a directory`);
    case "EEXIST":
      return new ControlPlaneError("conflict", `${p} already exists in volume '${volume}'`);
    case "EISDIR":
      return invalid(`${p} is a directory: ${what} needs a file`);
    case "ENOTEMPTY":
      return new ControlPlaneError("conflict", `${p} is not empty`);
    case "ENOSPC":
    case "EDQUOT":
      return new VolumeFullError(`volume '${volume}' is full: ${what} of ${p} ran out of space. Remove files, or create a bigger volume (sizeMB)`);
    case "ENAMETOOLONG":
      return invalid(`${p}: name too long`);
    case "ENXIO":
    case "EOPNOTSUPP":
      return invalid(`${p} is not a regular file or directory`);
    default:
      return err as Error;
  }
}

/** A write past the volume's size (507 Insufficient Storage). */
export class VolumeFullError extends Error {
  readonly status = 507;
}
