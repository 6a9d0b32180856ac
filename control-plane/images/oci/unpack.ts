// From the local OCI layout to a root folder: the layers' unpacked size
// measured first (streamed through gunzip, nothing written), so an image
// over the limit, or a layer that inflates without end, fails before it
// fills the disk; then `umoci raw unpack`, which applies the layers in order
// with their whiteouts (.wh.<name> deletes, .wh..wh..opq empties a folder)
// and, run as root, keeps owners, modes (setuid included) and xattrs. `raw`
// leaves out umoci's bundle files (mtree, runtime config) that nothing here
// reads.
import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import type { Logger } from "pino";
import { ImagePullError } from "./errors.js";
import type { Descriptor } from "./manifest.js";
import { runTool } from "./tool-run.js";

export interface LocalImage {
  config: string;
  layers: { path: string; mediaType?: string }[];
}

function blobPath(layout: string, d: Descriptor): string {
  const m = /^sha256:([a-f0-9]{64})$/.exec(d.digest);
  if (!m) throw new ImagePullError("failed", `unexpected digest ${d.digest} in the local image`);
  return join(layout, "blobs", "sha256", m[1]!);
}

/** The config and layer files of `ref` in the layout skopeo wrote. */
export async function readLocalImage(layout: string, ref: string): Promise<LocalImage> {
  const index = JSON.parse(await readFile(join(layout, "index.json"), "utf8")) as { manifests?: (Descriptor & { annotations?: Record<string, string> })[] };
  const entry = index.manifests?.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === ref);
  if (!entry) throw new ImagePullError("failed", `skopeo left no ${ref} in ${layout}`);
  const manifest = JSON.parse(await readFile(blobPath(layout, entry), "utf8")) as { config: Descriptor; layers: Descriptor[] };
  return { config: blobPath(layout, manifest.config), layers: manifest.layers.map((l) => ({ path: blobPath(layout, l), mediaType: l.mediaType })) };
}

class TooLarge extends Error {}

/** The layers' size as tar streams, added up; throws too_large as soon as it passes `max`. */
export async function unpackedBytes(img: LocalImage, max: number, image: string, signal?: AbortSignal): Promise<number> {
  let total = 0;
  const counter = () =>
    new Writable({
      write(chunk: Buffer, _enc, done) {
        total += chunk.length;
        done(total > max ? new TooLarge() : null);
      },
    });
  try {
    for (const layer of img.layers) {
      const src = createReadStream(layer.path);
      if (layer.mediaType?.endsWith(".tar")) await pipeline(src, counter(), { signal });
      else await pipeline(src, createGunzip(), counter(), { signal });
    }
  } catch (err) {
    if (err instanceof TooLarge) throw new ImagePullError("too_large", `image ${image} unpacks to more than ${Math.round(max / 1024 / 1024)} MiB, the limit (LOCALE2B_IMAGE_PULL_MAX_MB)`);
    if (signal?.aborted) throw err;
    throw new ImagePullError("failed", `a layer of ${image} cannot be read as a (gzip-compressed) tar: ${(err as Error).message}`);
  }
  return total;
}

export async function unpack(o: { umoci: string; layout: string; ref: string; rootfs: string; signal?: AbortSignal; log: Logger }): Promise<void> {
  await runTool(o.umoci, ["raw", "unpack", "--image", `${o.layout}:${o.ref}`, o.rootfs], {
    env: { PATH: process.env.PATH, HOME: "/" },
    signal: o.signal,
    onLine: (line) => o.log.debug({ tool: "umoci" }, line.replace(/^\s*[•⨯]\s*/, "")),
  });
}
