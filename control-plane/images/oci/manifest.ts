// Reading what a registry returned for a ref: an image manifest, or an
// index (a multi-arch image) from which the linux/amd64 manifest is taken.
// Both OCI and Docker v2 media types; Docker's schema 1 is refused.
import { createHash } from "node:crypto";
import { ImagePullError } from "./errors.js";

export interface Descriptor {
  mediaType?: string;
  digest: string;
  size: number;
  platform?: { os?: string; architecture?: string; variant?: string };
}

export type ImageManifest = { kind: "image"; config: Descriptor; layers: Descriptor[] };
export type RegistryManifest = { kind: "index"; manifests: Descriptor[] } | ImageManifest;

export const PLATFORM = { os: "linux", architecture: "amd64" } as const;

/** A registry's digest for these bytes. */
export function digestOf(raw: Buffer): string {
  return `sha256:${createHash("sha256").update(raw).digest("hex")}`;
}

function descriptor(d: unknown): d is Descriptor {
  const x = d as Descriptor;
  return typeof x === "object" && x !== null && typeof x.digest === "string" && /^sha256:[a-f0-9]{64}$/.test(x.digest) && typeof x.size === "number";
}

export function parseManifest(raw: Buffer, image: string): RegistryManifest {
  let m: { schemaVersion?: number; mediaType?: string; manifests?: unknown[]; config?: unknown; layers?: unknown[] };
  try {
    m = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new ImagePullError("failed", `the registry's manifest for ${image} is not JSON`);
  }
  if (m.schemaVersion === 1) throw new ImagePullError("failed", `image ${image} has a Docker schema 1 manifest, which registries and tools no longer support: push it again with a current docker or skopeo`);
  if (Array.isArray(m.manifests)) {
    if (!m.manifests.every(descriptor)) throw new ImagePullError("failed", `the registry's index for ${image} has malformed entries`);
    return { kind: "index", manifests: m.manifests };
  }
  if (descriptor(m.config) && Array.isArray(m.layers) && m.layers.every(descriptor)) return { kind: "image", config: m.config, layers: m.layers };
  throw new ImagePullError("failed", `the registry's manifest for ${image} is neither an image manifest nor an index`);
}

/** The linux/amd64 entry of an index (the plainest variant first); else a platform error listing what there is. */
export function pickPlatform(index: Descriptor[], image: string): Descriptor {
  const amd64 = index.filter((d) => d.platform?.os === PLATFORM.os && d.platform?.architecture === PLATFORM.architecture);
  const best = amd64.find((d) => !d.platform?.variant || d.platform.variant === "v1") ?? amd64[0];
  if (best) return best;
  const there = [...new Set(index.map((d) => [d.platform?.os, d.platform?.architecture, d.platform?.variant].filter(Boolean).join("/")).filter((p) => p && p !== "unknown/unknown"))];
  throw new ImagePullError("platform", `image ${image} has no linux/amd64 variant (it has ${there.join(", ") || "none named"}): only linux/amd64 images run here`);
}

const CONFIG_TYPES = new Set(["application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"]);

/** Layers umoci unpacks as they are (tar, tar+gzip), or after skopeo recompresses them (tar+zstd). */
function layerKind(mediaType: string | undefined): "tar" | "gzip" | "zstd" | undefined {
  if (!mediaType) return "gzip"; // pre-OCI registries leave it out; gzip is what they hold
  if (/^application\/vnd\.(?:oci\.image\.layer(?:\.nondistributable)?\.v1|docker\.image\.rootfs(?:\.foreign)?\.diff)\.tar(?:\.gzip|\+gzip)$/.test(mediaType)) return "gzip";
  if (/^application\/vnd\.oci\.image\.layer(?:\.nondistributable)?\.v1\.tar\+zstd$/.test(mediaType)) return "zstd";
  if (/^application\/vnd\.oci\.image\.layer(?:\.nondistributable)?\.v1\.tar$/.test(mediaType)) return "tar";
  return undefined;
}

/** Checks it is a container image; says whether any layer needs recompressing, and its compressed size. */
export function checkImageManifest(m: ImageManifest, image: string): { zstd: boolean; bytes: number } {
  if (m.config.mediaType && !CONFIG_TYPES.has(m.config.mediaType)) throw new ImagePullError("failed", `${image} is not a container image (its config is ${m.config.mediaType})`);
  let zstd = false;
  for (const l of m.layers) {
    const kind = layerKind(l.mediaType);
    if (!kind) throw new ImagePullError("failed", `${image} has a layer of type ${l.mediaType}, which is not a file system layer`);
    zstd ||= kind === "zstd";
  }
  return { zstd, bytes: m.config.size + m.layers.reduce((n, l) => n + l.size, 0) };
}
