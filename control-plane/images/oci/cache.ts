// The pull cache under the images dir:
//   oci/blobs/sha256/<hex>        layers, configs, manifests by digest, shared by every pull (skopeo skips a
//                                 blob that is there: a second image with the same base layers fetches only its own)
//   oci/images/<hex>/rootfs/      the unpacked root of the linux/amd64 manifest <hex> (the registry's digest);
//                                 read-only for callers: copy it (or overlay it) to change it
//   oci/images/<hex>/image.json   PulledRecord
//   oci/images/<hex'> -> <hex>    a multi-arch index's digest, to its linux/amd64 image
//   oci/tmp/<pid>-<rand>/         a pull in progress (mode 0700): auth file, skopeo's HOME, an OCI layout whose
//                                 blobs/ links to oci/blobs, the unpack; removed after, or by a later pull once
//                                 <pid> is gone
// An image is unpacked in its tmp folder and renamed into images/, so a
// folder there is complete; of two pulls of one image that race, the first
// rename wins and the second uses it.
import { randomBytes } from "node:crypto";
import { mkdir, readFile, readdir, rename, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { removeTree } from "../template-fs.js";
import type { ImageConfig } from "./image-config.js";
import { pidAlive } from "../../host/pids.js";

export interface OciCache {
  root: string;
  blobs: string;
  images: string;
  tmp: string;
}

export interface PulledRecord {
  /** The image as pulled, in full (docker.io/library/python:3.12). */
  ref: string;
  /** The linux/amd64 manifest's digest at the registry. */
  digest: string;
  config: ImageConfig;
  /** The layers' unpacked size (an upper bound of the root's). */
  bytes: number;
  /** Where it came from (a host; a mirror's when it was a mirror). */
  source: string;
  /**
   * Pulled without credentials: anyone may have it. Only such an image is
   * served by digest without asking a registry; one that took credentials is
   * served only after the registry has answered the caller's own request for
   * it, so a digest alone (they leak: logs, build output) opens no private image.
   */
  anonymous: boolean;
  pulledAt: string;
}

export function ociCache(imagesDir: string): OciCache {
  const root = join(imagesDir, "oci");
  return { root, blobs: join(root, "blobs"), images: join(root, "images"), tmp: join(root, "tmp") };
}

const hex = (digest: string) => digest.replace(/^sha256:/, "");

/** The cached image for a digest (a manifest's, or an index's), or undefined. */
export async function findPulled(cache: OciCache, digest: string): Promise<{ dir: string; record: PulledRecord } | undefined> {
  const dir = join(cache.images, hex(digest));
  try {
    const record = JSON.parse(await readFile(join(dir, "image.json"), "utf8")) as PulledRecord;
    return { dir, record };
  } catch {
    return undefined;
  }
}

/** Work folders of pulls whose process is gone (a crash, a SIGKILL): removed. */
async function removeAbandoned(cache: OciCache): Promise<void> {
  let names: string[];
  try {
    names = await readdir(cache.tmp);
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(/^(\d+)-/.exec(name)?.[1]);
    if (pid && pid !== process.pid && !pidAlive(pid)) await removeTree(join(cache.tmp, name)).catch(() => undefined);
  }
}

/** A new private work folder for one pull (and the cache's folders, made once). */
export async function startWork(cache: OciCache): Promise<string> {
  await mkdir(join(cache.blobs, "sha256"), { recursive: true });
  await mkdir(cache.images, { recursive: true });
  await mkdir(cache.tmp, { recursive: true, mode: 0o700 });
  await removeAbandoned(cache);
  const dir = join(cache.tmp, `${process.pid}-${randomBytes(6).toString("hex")}`);
  await mkdir(dir, { mode: 0o700 });
  return dir;
}

/** An OCI layout in the work folder whose blobs are the shared ones. */
export async function makeLayout(cache: OciCache, work: string): Promise<string> {
  const layout = join(work, "layout");
  await mkdir(layout);
  await writeFile(join(layout, "oci-layout"), '{"imageLayoutVersion":"1.0.0"}');
  await symlink(cache.blobs, join(layout, "blobs"));
  return layout;
}

/**
 * Moves the unpacked `work/image` into images/<digest> and points `aliases`
 * (an index's digest) at it. Returns the folder now holding the image: this
 * one, or the one a concurrent pull put there first.
 */
export async function commitImage(cache: OciCache, work: string, digest: string, record: PulledRecord, aliases: string[]): Promise<string> {
  const staged = join(work, "image");
  await writeFile(join(staged, "image.json"), `${JSON.stringify(record, null, 2)}\n`);
  const dir = join(cache.images, hex(digest));
  try {
    await rename(staged, dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "ENOTEMPTY" && code !== "EEXIST") throw err;
    // another pull of this image finished first: its copy is as good; ours goes with the work folder
  }
  for (const alias of aliases) {
    if (alias === digest) continue;
    const link = join(work, `alias-${hex(alias)}`);
    await symlink(hex(digest), link);
    await rename(link, join(cache.images, hex(alias))).catch(() => undefined); // best effort: without it the index is asked again
  }
  return dir;
}
