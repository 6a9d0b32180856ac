// Which sandboxes and snapshots use an image version (`templates/<name>-<hash16>/`),
// so a clean-up never removes the files one of them runs on: the process and
// gVisor runtimes mount its rootfs as their overlay's lower layer, QEMU's disks
// and filesystem snapshots name its rootfs.ext4 as their backing file. A holder
// is a directory (a sandbox's, a pause to disk's, a snapshot's) and holds one
// image, in two files:
//   <holder>/.image                  the image's directory: what the holder's files depend on
//   <image>/.refs/<sha256(holder)>   the holder's directory: how a clean-up finds it
// The image is held while some reference's holder still names it. A holder that
// is removed (a sandbox killed) or that now names another image (restarted on a
// newer build) holds nothing: its stale reference is dropped when next looked at.
// Both files are on disk, so holds outlive restarts and are seen by every
// process sharing the image cache (a `locale2b template build` beside a server).
// A new sandbox starts on the current build, which a prune never removes, and
// holds it before using it; a copy of held files (a snapshot, a pause to disk)
// is held before its source can go. Not held: Firecracker's disks (full copies
// of the image) and the template step cache's entries (keyed by the build they
// sit on: a rebuilt base makes them misses, and they age out of the cache).
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Logger } from "pino";
import { findTemplateImage, templateImageAt, type GuestImage } from "./layout.js";

const REFS = ".refs";
/** In a holder: the image directory it uses. */
export const HOLD_FILE = ".image";

function writeAtomic(file: string, text: string): void {
  const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    writeFileSync(tmp, text);
    renameSync(tmp, file);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

function refName(holder: string): string {
  return createHash("sha256").update(holder).digest("hex").slice(0, 32);
}

/**
 * Records that `holder` (a directory, made if missing) uses the image in
 * `imageDir`, replacing what it held before. Fails when the image is gone.
 * An image cache this process may not write (another user's) cannot record
 * it: `log` says so, and the sandbox goes on unprotected from its owner's prunes.
 */
export function holdImage(imageDir: string, holder: string, log?: Logger): void {
  const image = resolve(imageDir);
  const dir = resolve(holder);
  mkdirSync(dir, { recursive: true });
  // The holder's side first: a reference is only ever seen with its holder naming the image.
  writeAtomic(join(dir, HOLD_FILE), `${image}\n`);
  try {
    const refs = join(image, REFS);
    try {
      // Never recursive: an image removed meanwhile must not come back as an empty folder.
      mkdirSync(refs, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    writeAtomic(join(refs, refName(dir)), `${dir}\n`);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "EACCES" || code === "EPERM" || code === "EROFS") {
      log?.warn({ image, holder: dir, err: (err as Error).message }, "cannot record which template build these files use (the image cache is not writable here): a rebuild by the cache's owner may remove it");
      return;
    }
    rmSync(join(dir, HOLD_FILE), { force: true });
    throw new Error(`cannot hold the image ${image}: ${(err as Error).message}`);
  }
}

/** The image directory `holder` uses, if it holds one. */
export function heldImage(holder: string): string | undefined {
  try {
    return readFileSync(join(holder, HOLD_FILE), "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Makes `to` hold what `from` holds (a copy or a move of `from`'s files, which
 * depend on the same image); returns that image directory, if any.
 */
export function carryHold(from: string, to: string, log?: Logger): string | undefined {
  const image = heldImage(from);
  if (image) holdImage(image, to, log);
  return image;
}

/** `holder` no longer uses its image (its files that did are gone). */
export function releaseImage(holder: string): void {
  rmSync(join(holder, HOLD_FILE), { force: true });
}

function sameDir(a: string, b: string): boolean {
  try {
    const x = statSync(a);
    const y = statSync(b);
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false;
  }
}

/** The holders that use the image in `imageDir` now; references of holders that do not any more are deleted. */
export function imageHolders(imageDir: string): string[] {
  const refs = join(imageDir, REFS);
  let names: string[];
  try {
    names = readdirSync(refs);
  } catch {
    return [];
  }
  const holders: string[] = [];
  for (const n of names) {
    if (n.includes(".tmp-")) continue; // being written
    const file = join(refs, n);
    let holder: string;
    try {
      holder = readFileSync(file, "utf8").trim();
    } catch {
      continue;
    }
    // The same directory, whatever path reached it (the image cache may be a symlink for someone).
    const named = holder ? heldImage(holder) : undefined;
    if (named && sameDir(named, imageDir)) holders.push(holder);
    else rmSync(file, { force: true });
  }
  return holders;
}

/** Whether a sandbox, a pause to disk or a snapshot still uses the image in `imageDir`. */
export function imageHeld(imageDir: string): boolean {
  return imageHolders(imageDir).length > 0;
}

/**
 * The build a sandbox runs on: the one a snapshot's files hold (they are a
 * layer over that build, or name it as their backing file) while it is
 * there, else the template's current build.
 */
export function sandboxImage(templateId: string, imagesDir: string, fromDir?: string): GuestImage | undefined {
  const held = fromDir ? heldImage(fromDir) : undefined;
  return (held ? templateImageAt(held) : undefined) ?? findTemplateImage(templateId, imagesDir);
}
