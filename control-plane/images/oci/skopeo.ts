// skopeo, run so that only what this pull was given counts: its own HOME
// (no ~/.docker/config.json or containers auth.json of the server's user:
// an API user must not pull with the operator's credentials), its own
// registries.conf (mirrors are ours, sources.ts), no signature lookaside
// config, and linux/amd64 picked from multi-arch indexes. Credentials go in
// a 0600 auth file; a mirror is asked anonymously.
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { writeAuthFile } from "./auth-file.js";
import type { Credentials } from "./auth.js";
import { classifySkopeoFailure } from "./classify.js";
import type { PullSource } from "./sources.js";
import { runTool, ToolFailed } from "./tool-run.js";

export interface Skopeo {
  bin: string;
  /** The pull's private work folder (mode 0700). */
  dir: string;
  env: NodeJS.ProcessEnv;
  authFile: string;
  /** Credentials are in authFile for this host (the image's own registry). */
  credentialsFor?: string;
  signal: AbortSignal;
  log: Logger;
  /** The image as the user wrote it, for messages. */
  image: string;
}

/** Proxy settings pass through: a host behind a proxy reaches registries through it. */
const PASSED_ENV = ["PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"];

/** Manifests and indexes are small; a registry answering more is not one. */
const MAX_MANIFEST = 4 * 1024 * 1024;

export async function prepareSkopeo(o: { bin: string; dir: string; registry: string; credentials?: Credentials; signal: AbortSignal; log: Logger; image: string }): Promise<Skopeo> {
  const home = join(o.dir, "home");
  await mkdir(join(home, "registries.d"), { recursive: true, mode: 0o700 });
  await mkdir(join(o.dir, "tmp"), { mode: 0o700 });
  await writeFile(join(home, "registries.conf"), "unqualified-search-registries = []\n");
  const env: NodeJS.ProcessEnv = { HOME: home, TMPDIR: join(o.dir, "tmp") };
  for (const k of PASSED_ENV) if (process.env[k] !== undefined) env[k] = process.env[k];
  const authFile = await writeAuthFile(o.dir, o.registry, o.credentials);
  return { bin: o.bin, dir: o.dir, env, authFile, credentialsFor: o.credentials ? o.registry : undefined, signal: o.signal, log: o.log, image: o.image };
}

function globalArgs(s: Skopeo): string[] {
  const home = s.env.HOME!;
  return [
    "--registries-conf", join(home, "registries.conf"),
    "--registries.d", join(home, "registries.d"),
    // No signature policy: the pull is pinned to the digest it resolved, and images here are not signed.
    "--insecure-policy",
    "--tmpdir", s.env.TMPDIR!,
    "--override-os", "linux",
    "--override-arch", "amd64",
  ];
}

/** Credentials go to the image's own registry only, never to a mirror. */
export function sendsCredentials(s: Skopeo, src: PullSource): boolean {
  return src.mirrorOf === undefined && s.credentialsFor === src.host;
}

/** `--authfile F` or `--no-creds`, and `--tls-verify=false` where allowed; `src` prefixes them for copy. */
function sourceArgs(s: Skopeo, src: PullSource, prefix: "" | "src-"): string[] {
  return [...(sendsCredentials(s, src) ? [`--${prefix}authfile`, s.authFile] : [`--${prefix}no-creds`]), ...(src.insecure ? [`--${prefix}tls-verify=false`] : [])];
}

async function run(s: Skopeo, src: PullSource, args: string[], o: { maxStdout?: number; onLine?: (l: string) => void } = {}): Promise<Buffer> {
  try {
    return await runTool(s.bin, [...globalArgs(s), ...args], { env: s.env, signal: s.signal, ...o });
  } catch (err) {
    if (err instanceof ToolFailed) throw classifySkopeoFailure(err, { image: s.image, src, withCredentials: sendsCredentials(s, src) });
    throw err;
  }
}

/** The manifest or index `spec` (`:tag` or `@sha256:...`) names, as the registry's bytes (their sha256 is its digest). */
export function inspectRaw(s: Skopeo, src: PullSource, spec: string): Promise<Buffer> {
  return run(s, src, ["inspect", "--raw", "--retry-times", "0", ...sourceArgs(s, src, ""), `docker://${src.name}${spec}`], { maxStdout: MAX_MANIFEST });
}

/**
 * Copies the image `digest` into the OCI layout `layout` as `ref`. Blobs
 * already in the layout are not fetched again. `gzip`: recompress zstd
 * layers, which umoci 0.4 cannot unpack.
 */
export async function copyToLayout(s: Skopeo, src: PullSource, digest: string, layout: string, ref: string, o: { gzip: boolean }): Promise<void> {
  const args = [
    "copy",
    "--remove-signatures",
    "--retry-times", "2",
    ...(o.gzip ? ["--dest-compress", "--dest-compress-format", "gzip"] : []),
    ...sourceArgs(s, src, "src-"),
    `docker://${src.name}@${digest}`,
    `oci:${layout}:${ref}`,
  ];
  await run(s, src, args, { onLine: (line) => s.log.debug({ tool: "skopeo" }, line) });
}
