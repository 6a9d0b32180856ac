// pullImage: any OCI image from any registry into a root folder, for a
// template that starts `fromImage(ref)`. The steps, each in its own file:
//   reference.ts   the ref as Docker reads it (python:3.12 → docker.io/library/python:3.12)
//   auth.ts        E2B's three credential forms → a user and password (ecr.ts asks AWS, sigv4.ts signs)
//   sources.ts     mirrors first (LOCALE2B_REGISTRY_MIRRORS), then the registry; plain HTTP only where listed
//   skopeo.ts      the manifest (a multi-arch index gives its linux/amd64 entry, manifest.ts), then the
//                  image, pinned to that digest, into a layout whose blobs are shared (cache.ts)
//   unpack.ts      measured, then unpacked by umoci: whiteouts applied, owners and setuid bits kept
//   image-config.ts ENV, WORKDIR, USER, ENTRYPOINT, CMD
// An image already unpacked is not fetched again: by tag, one manifest
// request tells whether the tag still names it; by digest, a public image's
// registry is not even asked (a private one's is, with the caller's
// credentials: cache.ts, PulledRecord.anonymous).
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { removeTree } from "../template-fs.js";
import { registryCredentials } from "./auth.js";
import { commitImage, findPulled, makeLayout, ociCache, startWork, type OciCache, type PulledRecord } from "./cache.js";
import { ImagePullError } from "./errors.js";
import { readImageConfig, type ImageConfig } from "./image-config.js";
import { checkImageManifest, digestOf, parseManifest, pickPlatform, type ImageManifest } from "./manifest.js";
import { formatRef, parseImageRef, type ImageRef } from "./reference.js";
import { registrySettings, type RegistrySettings } from "./registry-settings.js";
import { copyToLayout, inspectRaw, prepareSkopeo, sendsCredentials, type Skopeo } from "./skopeo.js";
import { describeSource, pullSources, type PullSource } from "./sources.js";
import { pullTools } from "./tools.js";
import { readLocalImage, unpack, unpackedBytes } from "./unpack.js";

export type { RegistryAuth } from "./auth.js";
export type { ImageConfig } from "./image-config.js";
export { ImagePullError } from "./errors.js";

export interface PullImageOptions {
  /** `python:3.12`, `ghcr.io/owner/app:v1`, `name@sha256:...`. */
  ref: string;
  /** E2B's `fromImageRegistry`: {type: "registry" | "aws" | "gcp", ...}; for the image's own registry only, never a mirror. */
  auth?: unknown;
  imagesDir: string;
  log: Logger;
  signal?: AbortSignal;
  /** Defaults to the LOCALE2B_* settings (registrySettings()). */
  settings?: RegistrySettings;
}

export interface PulledImage {
  /** The unpacked root (owned by root, setuid bits kept). Shared by every pull of this image: do not change it. */
  rootfsDir: string;
  config: ImageConfig;
  /** The linux/amd64 manifest's digest: pulling `<name>@<digest>` gives this root again. */
  digest: string;
  /** Found unpacked: nothing was downloaded. */
  cached: boolean;
  /** The host it came from (a mirror's, when a mirror had it). */
  source: string;
}

const LOCAL_REF = "image";

function result(hit: { dir: string; record: PulledRecord }, cached: boolean): PulledImage {
  return { rootfsDir: join(hit.dir, "rootfs"), config: hit.record.config, digest: hit.record.digest, cached, source: hit.record.source };
}

/** The first source that has the image: its manifest (or index) bytes. A mirror's failure moves on to the next. */
async function resolve(skopeo: Skopeo, sources: PullSource[], spec: string, log: Logger): Promise<{ src: PullSource; raw: Buffer }> {
  const failures: { src: PullSource; err: ImagePullError }[] = [];
  for (const src of sources) {
    try {
      return { src, raw: await inspectRaw(skopeo, src, spec) };
    } catch (err) {
      if (!(err instanceof ImagePullError) || skopeo.signal.aborted) throw err;
      failures.push({ src, err });
      if (src !== sources.at(-1)) log.warn({ source: src.host, code: err.code }, `${describeSource(src)}: ${err.message}; trying the next source`);
    }
  }
  const last = failures.at(-1)!;
  const earlier = failures.slice(0, -1).map((f) => `${describeSource(f.src)}: ${f.err.code.replace("_", " ")}`);
  throw earlier.length ? new ImagePullError(last.err.code, `${last.err.message} (also tried ${earlier.join("; ")})`) : last.err;
}

interface Fetch {
  cache: OciCache;
  work: string;
  ref: ImageRef;
  image: string;
  settings: RegistrySettings;
  umoci: string;
  skopeo: Skopeo;
  log: Logger;
}

/** The linux/amd64 manifest an index names, checked against its digest. */
async function platformManifest(f: Fetch, src: PullSource, digest: string): Promise<ImageManifest> {
  const raw = await inspectRaw(f.skopeo, src, `@${digest}`);
  if (digestOf(raw) !== digest) throw new ImagePullError("failed", `${describeSource(src)} answered ${f.image}'s linux/amd64 manifest with other bytes than its index names`);
  const manifest = parseManifest(raw, f.image);
  if (manifest.kind !== "image") throw new ImagePullError("failed", `${f.image}'s linux/amd64 entry is itself an index`);
  return manifest;
}

/** Copies the image into the shared blobs, measures it, unpacks it, and moves it into the cache. */
async function download(f: Fetch, src: PullSource, digest: string, manifest: ImageManifest, aliases: string[]): Promise<PulledImage> {
  const { skopeo, image, log } = f;
  const { zstd, bytes } = checkImageManifest(manifest, image);
  const mib = (n: number) => Math.round(n / 1024 / 1024);
  if (bytes > f.settings.maxBytes) throw new ImagePullError("too_large", `image ${image} is ${mib(bytes)} MiB compressed, over the ${mib(f.settings.maxBytes)} MiB limit (LOCALE2B_IMAGE_PULL_MAX_MB)`);
  log.info({ digest, source: src.host, layers: manifest.layers.length, compressedBytes: bytes }, `pulling ${image} from ${describeSource(src)}`);
  const layout = await makeLayout(f.cache, f.work);
  await copyToLayout(skopeo, src, digest, layout, LOCAL_REF, { gzip: zstd });
  const local = await readLocalImage(layout, LOCAL_REF);
  const config = await readImageConfig(local.config, image);
  const unpacked = await unpackedBytes(local, f.settings.maxBytes, image, skopeo.signal);
  await mkdir(join(f.work, "image"), { mode: 0o755 });
  await unpack({ umoci: f.umoci, layout, ref: LOCAL_REF, rootfs: join(f.work, "image", "rootfs"), signal: skopeo.signal, log });
  const record: PulledRecord = {
    ref: formatRef({ ...f.ref, digest }),
    digest,
    config,
    bytes: unpacked,
    source: src.host,
    anonymous: !sendsCredentials(skopeo, src),
    pulledAt: new Date().toISOString(),
  };
  const dir = await commitImage(f.cache, f.work, digest, record, aliases);
  log.info({ digest, unpackedBytes: unpacked, dir }, `${image} unpacked`);
  return result((await findPulled(f.cache, digest)) ?? { dir, record }, false);
}

/** Resolves the ref at the first source that has it; downloads it unless that digest is unpacked already. */
async function fetchImage(f: Fetch): Promise<PulledImage> {
  const { src, raw } = await resolve(f.skopeo, pullSources(f.ref, f.settings), f.ref.digest ? `@${f.ref.digest}` : `:${f.ref.tag}`, f.log);
  const top = digestOf(raw);
  if (f.ref.digest && top !== f.ref.digest) throw new ImagePullError("failed", `${describeSource(src)} answered ${f.image} with a manifest whose digest is ${top}: not the image asked for`);
  const manifest = parseManifest(raw, f.image);
  const digest = manifest.kind === "index" ? pickPlatform(manifest.manifests, f.image).digest : top;
  const hit = await findPulled(f.cache, digest);
  if (hit) {
    f.log.info({ digest, source: src.host }, "image already unpacked: nothing to download");
    return result(hit, true);
  }
  if (manifest.kind === "image") return download(f, src, digest, manifest, []);
  return download(f, src, digest, await platformManifest(f, src, digest), [top]);
}

function aborted(err: unknown, signal: AbortSignal, timeout: AbortSignal, image: string, settings: RegistrySettings): unknown {
  if (!signal.aborted) return err;
  if (timeout.aborted) return new ImagePullError("timeout", `pulling ${image} took longer than ${settings.timeoutMs / 1000} s (LOCALE2B_IMAGE_PULL_TIMEOUT_S)`);
  return new ImagePullError("cancelled", `pulling ${image} was cancelled`);
}

export async function pullImage(o: PullImageOptions): Promise<PulledImage> {
  const ref = parseImageRef(o.ref);
  const image = o.ref.trim();
  const settings = o.settings ?? registrySettings();
  const timeout = AbortSignal.timeout(settings.timeoutMs);
  const signal = o.signal ? AbortSignal.any([o.signal, timeout]) : timeout;
  const log = o.log.child({ image: formatRef(ref) });
  const cache = ociCache(o.imagesDir);
  try {
    if (ref.digest) {
      const hit = await findPulled(cache, ref.digest);
      if (hit?.record.anonymous === true) {
        log.info({ digest: hit.record.digest }, "image already unpacked (by digest, public): the registry is not asked");
        return result(hit, true);
      }
    }
    const tools = await pullTools(log, signal);
    const credentials = await registryCredentials(o.auth, settings.ecrEndpoint, signal);
    const work = await startWork(cache);
    try {
      const skopeo = await prepareSkopeo({ bin: tools.skopeo, dir: work, registry: ref.registry, credentials, signal, log, image });
      return await fetchImage({ cache, work, ref, image, settings, umoci: tools.umoci, skopeo, log });
    } finally {
      await removeTree(work);
    }
  } catch (err) {
    throw aborted(err, signal, timeout, image, settings);
  }
}
