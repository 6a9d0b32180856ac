// The npm registry's tarballs of a template's `node.packages` (npm, yarn, ...),
// fetched on the host with `npm pack`, so the host's npm configuration
// applies (registry or mirror, proxy, CA), into <imagesDir>/npm/, one file per
// exact version, reused from there by every later build. An air-gapped host
// can put the file there itself: the build says where.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { mkdir, readdir, rename } from "node:fs/promises";
import { join } from "node:path";
import { findExecutable } from "../host/executables.js";
import type { NpmPackage } from "./template-definition.js";
import { BuildSetupError, BuildStepError, mustRun, requireTool } from "./template-exec.js";
import { removeTree } from "./template-fs.js";

export interface NpmTarball extends NpmPackage {
  /** `<imagesDir>/npm/<name>-<version>.tgz` (a scope's `@` dropped and its `/` made `-`, as npm pack names it). */
  file: string;
  sha256: string;
  /** It was there already. */
  cached: boolean;
}

export function npmTarballPath(imagesDir: string, pkg: NpmPackage): string {
  return join(imagesDir, "npm", `${pkg.name.replace(/^@/, "").replace("/", "-")}-${pkg.version}.tgz`);
}

async function sha256File(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/** The tarballs of `packages`, fetched unless cached; `log` hears about each fetch. */
export async function ensureNpmTarballs(packages: NpmPackage[], imagesDir: string, opts: { env?: NodeJS.ProcessEnv; log?: (line: string) => void } = {}): Promise<NpmTarball[]> {
  const out: NpmTarball[] = [];
  for (const pkg of packages) {
    const file = npmTarballPath(imagesDir, pkg);
    const cached = existsSync(file);
    if (!cached) await fetchTarball(pkg, file, opts.env ?? process.env, opts.log);
    out.push({ ...pkg, file, sha256: await sha256File(file), cached });
  }
  return out;
}

async function fetchTarball(pkg: NpmPackage, file: string, env: NodeJS.ProcessEnv, log?: (line: string) => void): Promise<void> {
  const step = `fetch ${pkg.spec} from the npm registry`;
  const npm = findExecutable("npm", undefined, env);
  if (!npm) throw new BuildSetupError(`${step}: npm is not installed on this host (it comes with Node.js); install it, or put the package's tarball at ${file}`);
  const dir = join(file, "..");
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.tmp-${process.pid}-${randomBytes(3).toString("hex")}`);
  await mkdir(tmp);
  try {
    log?.(`fetching ${pkg.spec} (npm pack)`);
    try {
      await mustRun(step, npm, ["pack", pkg.spec, "--pack-destination", tmp, "--ignore-scripts", "--loglevel=error"], { cwd: tmp, env, tailBytes: 3000 });
    } catch (err) {
      if (err instanceof BuildStepError) throw new BuildStepError(step, `${err.message.split("\n")[0]}; or put the package's tarball at ${file}`, err.outputTail);
      throw err;
    }
    const got = (await readdir(tmp)).filter((n) => n.endsWith(".tgz"));
    if (got.length !== 1) throw new BuildStepError(step, `npm pack left ${got.length} tarballs in ${tmp}, expected 1`);
    // What the registry sent must be the package asked for (a mirror can be wrong).
    const manifest = await mustRun(`${step}: read its package.json`, requireTool("tar", env), ["-xzOf", join(tmp, got[0]!), "package/package.json"], { tailBytes: 256 * 1024 });
    let meta: { name?: unknown; version?: unknown };
    try {
      meta = JSON.parse(manifest) as typeof meta;
    } catch {
      throw new BuildStepError(step, "the tarball's package/package.json is not JSON");
    }
    if (meta.name !== pkg.name || meta.version !== pkg.version) {
      throw new BuildStepError(step, `the registry sent ${String(meta.name)}@${String(meta.version)}, not ${pkg.spec}`);
    }
    await rename(join(tmp, got[0]!), file);
  } finally {
    await removeTree(tmp);
  }
}
