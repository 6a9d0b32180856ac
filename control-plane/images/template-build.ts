// `locale2b template build <name>`: a guest image from a definition in
// rootfs/templates/. Two cached layers under the images dir (layout.ts):
//   layers/<name>-<hashA>/rootfs   debootstrap + user + local CAs + `run` + trim (hashA: the definition parts it uses)
//   templates/<name>-<hashB>/      rootfs/ (layer + envd's runtime + init + user's Node + files), rootfs.ext4, manifest.json
// hashB covers hashA, envd's runtime (the Node binary, the envd bundle and
// the host libraries they load: guest-runtime.ts), the init binary, the npm
// tarballs, the definition's files and this builder's version. Everything
// is built under a temporary name and renamed into place; a per-template lock
// serializes builds.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { ensureEnvdBundle } from "./envd-bundle.js";
import { ensureInitBinary } from "./guest-init.js";
import { ensureGuestRuntime, guestRuntimeHash, nodeBinaryHash } from "./guest-runtime.js";
import { imagesDir as defaultImagesDir, type TemplateManifest } from "./layout.js";
import { ensureNpmTarballs } from "./npm-tarballs.js";
import { assembleRootfs, HOSTNAME, packExt4, verifyRootfs } from "./template-assemble.js";
import { definitionForManifest, layerHash, loadDefinition, templateInputs, type TemplateDefinition } from "./template-definition.js";
import { requireRoot, requireTool, Steps, type StepEvent } from "./template-exec.js";
import { removeTree } from "./template-fs.js";
import { ensureLayer, layerId } from "./template-layer.js";
import { acquireLock, pruneBuilds, removeStaleTemps, setCurrent } from "./template-store.js";

/** Bumped when what the builder adds to the layer changes: part of hashB. */
export const TEMPLATE_BUILDER_VERSION = 4;
export const BUILD_STEP_COUNT = 8;

export interface TemplateBuildManifest extends TemplateManifest {
  builderVersion: number;
  /** `<name>-<hash16>` of the base layer. */
  layer: string;
  nodeVersion: string;
  envdBundle: string;
  /** envd's runtime tree (guest-runtime.ts). */
  guestRuntime: string;
  init: string;
  imageSizeMiB: number;
  seconds: Record<string, number>;
}

export interface BuildTemplateOptions {
  /** Default: $LOCALE2B_IMAGES_DIR, else <data dir>/images. */
  imagesDir?: string;
  /** Rebuild the layer and the template even when cached. */
  force?: boolean;
  env?: NodeJS.ProcessEnv;
  /** Detail lines (bundling, compiling, waiting for a lock, pruning; with `verbose`, every command's output). */
  log?: (line: string) => void;
  /** The numbered steps, as they start and end. */
  progress?: (e: StepEvent) => void;
  verbose?: boolean;
}

export interface BuildTemplateResult {
  name: string;
  /** `<name>-<hash16>`. */
  id: string;
  hash: string;
  dir: string;
  rootfsDir: string;
  rootfsImage: string;
  /** Nothing was built: the template was up to date. */
  cached: boolean;
  layerCached: boolean;
  manifest: TemplateBuildManifest;
  seconds: number;
  pruned: string[];
}

async function sha256File(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}

export interface TemplateHashInputs {
  layerHash: string;
  nodeSha256: string;
  envdBundle: string;
  /** envd's runtime: the Node binary, the bundle and the host's libraries they load. */
  guestRuntime: string;
  initSha256: string;
  /** `<spec> <sha256>` of each `node.packages` tarball. */
  npmTarballs?: string[];
  template: Record<string, unknown>;
}

/** hashB: what the final template is made of. */
export function templateHash(parts: TemplateHashInputs): string {
  return createHash("sha256")
    .update(JSON.stringify({ builder: TEMPLATE_BUILDER_VERSION, hostname: HOSTNAME, ...parts }))
    .digest("hex");
}

function complete(dir: string): boolean {
  return existsSync(join(dir, "manifest.json")) && existsSync(join(dir, "rootfs.ext4")) && existsSync(join(dir, "rootfs"));
}

async function result(def: TemplateDefinition, dir: string, cached: boolean, layerCached: boolean, started: number, pruned: string[] = []): Promise<BuildTemplateResult> {
  const manifest = JSON.parse(await readFile(join(dir, "manifest.json"), "utf8")) as TemplateBuildManifest;
  return {
    name: def.name,
    id: `${def.name}-${manifest.hash}`,
    hash: manifest.hash,
    dir,
    rootfsDir: join(dir, "rootfs"),
    rootfsImage: join(dir, "rootfs.ext4"),
    cached,
    layerCached,
    manifest,
    seconds: (performance.now() - started) / 1000,
    pruned,
  };
}

/** Builds (or finds cached) the template `nameOrDef`: a name in rootfs/templates, a yaml path, or a parsed definition. */
export async function buildTemplate(nameOrDef: string | TemplateDefinition, opts: BuildTemplateOptions = {}): Promise<BuildTemplateResult> {
  const started = performance.now();
  const env = opts.env ?? process.env;
  const def = typeof nameOrDef === "string" ? loadDefinition(nameOrDef, env) : nameOrDef;
  const images = opts.imagesDir ?? defaultImagesDir(env);
  const log = opts.log;
  const onLine = opts.verbose && log ? (l: string) => log(`  | ${l}`) : undefined;
  const steps = new Steps(BUILD_STEP_COUNT, opts.progress);
  const seconds: Record<string, number> = {};
  const timed = async <T>(key: string, fn: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    try {
      return await fn();
    } finally {
      seconds[key] = Math.round(performance.now() - t) / 1000;
    }
  };

  const bundle = await steps.run("envd bundle", (s) =>
    timed("envdBundle", async () => {
      const b = await ensureEnvdBundle(images, { force: opts.force, log });
      if (b.cached) s.cached(`cached ${b.hash16}`);
      else s.note(`${b.hash16}, envd.js ${Math.round(b.bytes / 1024)} KiB`);
      return b;
    }),
  );
  const init = await steps.run("guest init", (s) =>
    timed("init", async () => {
      let built = false;
      const path = await ensureInitBinary(images, (l) => {
        built = true;
        log?.(l);
      });
      if (!built) s.cached("cached");
      return path;
    }),
  );
  const packages = def.node?.packages ?? [];
  const tarballs = await steps.run(`npm packages${packages.length ? ` (${packages.map((p) => p.spec).join(", ")})` : ""}`, (s) =>
    timed("npmPackages", async () => {
      const t = await ensureNpmTarballs(packages, images, { env, log });
      if (t.every((x) => x.cached)) s.cached(packages.length ? "cached" : "none");
      return t;
    }),
  );
  for (const skipped of def.localCAs.skipped) log?.(`CA certificates: left out ${def.localCAs.dir}/${skipped}`);
  const hashA = layerHash(def);
  const hash = templateHash({
    layerHash: hashA,
    nodeSha256: await nodeBinaryHash(process.execPath, images),
    envdBundle: bundle.hash16,
    guestRuntime: await guestRuntimeHash(images, bundle),
    initSha256: await sha256File(init),
    ...(tarballs.length ? { npmTarballs: tarballs.map((t) => `${t.spec} ${t.sha256}`) } : {}),
    template: templateInputs(def),
  });
  const hash16 = hash.slice(0, 16);
  const id = `${def.name}-${hash16}`;
  const templates = join(images, "templates");
  const finalDir = join(templates, id);
  if (!opts.force && complete(finalDir)) {
    await setCurrent(images, def.name, id);
    return result(def, finalDir, true, true, started);
  }

  requireRoot();
  for (const tool of ["chroot", "mount", "mkfs.ext4", "patchelf", ...(existsSync(join(images, "layers", layerId(def), "layer.json")) && !opts.force ? [] : ["debootstrap"])]) {
    requireTool(tool, env);
  }
  await mkdir(templates, { recursive: true });
  const release = await acquireLock(templates, def.name, { onWait: (pid) => log?.(`waiting for another build of '${def.name}' (pid ${pid})`) });
  const tmp = join(templates, `.tmp-${id}-${process.pid}-${randomBytes(3).toString("hex")}`);
  try {
    await removeStaleTemps(templates, def.name);
    await removeStaleTemps(join(images, "layers"), def.name);
    // Another process may have built it while we waited for the lock.
    if (!opts.force && complete(finalDir)) {
      await setCurrent(images, def.name, id);
      return result(def, finalDir, true, true, started);
    }
    const t = performance.now();
    const layer = await ensureLayer(def, images, steps, { force: opts.force, onLine });
    seconds.layer = Math.round(performance.now() - t) / 1000;
    await mkdir(tmp);
    const rootfs = join(tmp, "rootfs");
    const files = def.files.length ? ` + ${def.files.length} file${def.files.length === 1 ? "" : "s"}` : "";
    const userNode = def.node ? ` + user's node${tarballs.length ? ` and ${tarballs.map((t) => t.name).join(", ")}` : ""}` : "";
    const runtime = await ensureGuestRuntime(images, bundle, { log });
    await steps.run(`assemble rootfs (layer + node + envd + init${userNode}${files})`, () =>
      timed("assemble", async () => {
        const workDir = join(tmp, "work");
        await assembleRootfs({ def, layerRootfs: layer.rootfs, rootfs, nodeBinary: process.execPath, runtime, initBinary: init, npmTarballs: tarballs, workDir });
        await removeTree(workDir);
      }),
    );
    const nodeVersion = await steps.run("verify in a chroot (user, node --version, envd loads)", (s) =>
      timed("verify", async () => {
        const v = await verifyRootfs(def, rootfs);
        s.note(`node ${v}`);
        return v;
      }),
    );
    const packed = await steps.run("pack rootfs.ext4", (s) =>
      timed("pack", async () => {
        const p = await packExt4(rootfs, join(tmp, "rootfs.ext4"), def.diskSizeMB, onLine);
        s.note(`${p.sizeMiB} MiB`);
        return p;
      }),
    );
    const manifest: TemplateBuildManifest = {
      name: def.name,
      hash: hash16,
      builtAt: new Date().toISOString(),
      definition: definitionForManifest(def),
      rootfsBytes: packed.rootfsBytes,
      imageBytes: packed.imageBytes,
      builderVersion: TEMPLATE_BUILDER_VERSION,
      layer: layer.id,
      nodeVersion,
      envdBundle: bundle.hash16,
      guestRuntime: runtime.hash16,
      init: basename(dirname(init)),
      imageSizeMiB: packed.sizeMiB,
      seconds: { ...seconds, total: Math.round(performance.now() - started) / 1000 },
    };
    await writeFile(join(tmp, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`);
    if (existsSync(finalDir)) {
      // --force over an existing build: move the old one aside, then swap.
      const old = join(templates, `.tmp-${id}-${process.pid}-${randomBytes(3).toString("hex")}`);
      await rename(finalDir, old);
      await rename(tmp, finalDir);
      await removeTree(old);
    } else {
      await rename(tmp, finalDir);
    }
    await setCurrent(images, def.name, id);
    const pruned = [...(await pruneBuilds(images, "templates", def.name, id)), ...(await pruneBuilds(images, "layers", def.name, layer.id))];
    for (const p of pruned) log?.(`pruned ${p}`);
    return result(def, finalDir, false, layer.cached, started, pruned);
  } finally {
    await removeTree(tmp).catch((err: Error) => log?.(`cannot remove ${tmp}: ${err.message}`));
    await release();
  }
}
