// The image's own settings, from its config blob: ENV, WORKDIR, USER,
// ENTRYPOINT and CMD, which a template built on it keeps, and its platform,
// which must be linux/amd64.
import { readFile } from "node:fs/promises";
import { ImagePullError } from "./errors.js";
import { PLATFORM } from "./manifest.js";

export interface ImageConfig {
  /** ENV, in order; a later duplicate wins. */
  env: Record<string, string>;
  /** WORKDIR; "/" when unset. */
  workdir: string;
  /** USER as written (`app`, `1000`, `1000:1000`); "root" when unset. */
  user: string;
  entrypoint: string[];
  cmd: string[];
}

interface OciConfig {
  os?: string;
  architecture?: string;
  variant?: string;
  config?: { Env?: unknown; WorkingDir?: unknown; User?: unknown; Entrypoint?: unknown; Cmd?: unknown };
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : []);

export function imageConfig(raw: Buffer | string, image: string): ImageConfig {
  let c: OciConfig;
  try {
    c = JSON.parse(raw.toString());
  } catch {
    throw new ImagePullError("failed", `the config of ${image} is not JSON`);
  }
  if (c.os !== PLATFORM.os || c.architecture !== PLATFORM.architecture) {
    const is = [c.os, c.architecture, c.variant].filter(Boolean).join("/") || "an unnamed platform";
    throw new ImagePullError("platform", `image ${image} is for ${is}: only linux/amd64 images run here (pick the image's linux/amd64 tag or digest)`);
  }
  const env: Record<string, string> = {};
  for (const e of strings(c.config?.Env)) {
    const eq = e.indexOf("=");
    if (eq > 0) env[e.slice(0, eq)] = e.slice(eq + 1);
  }
  const workdir = typeof c.config?.WorkingDir === "string" && c.config.WorkingDir ? c.config.WorkingDir : "/";
  const user = typeof c.config?.User === "string" && c.config.User ? c.config.User : "root";
  return { env, workdir, user, entrypoint: strings(c.config?.Entrypoint), cmd: strings(c.config?.Cmd) };
}

export async function readImageConfig(blobPath: string, image: string): Promise<ImageConfig> {
  return imageConfig(await readFile(blobPath), image);
}
