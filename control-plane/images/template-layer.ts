// The base layer of a template: debootstrap, the sandbox user, the build
// host's locally added CA certificates, the definition's `run` commands, then
// trimmed (apt lists, docs, man pages, translations). Cached under <imagesDir>/layers/<name>-<hash16>/rootfs,
// keyed by the definition parts it depends on, so a second build skips it.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, rename, rm, rmdir, writeFile, lstat } from "node:fs/promises";
import { join, posix } from "node:path";
import { GUEST } from "./layout.js";
import { LOCAL_CA_DIR } from "./local-cas.js";
import { layerHash, layerInputs, type TemplateDefinition } from "./template-definition.js";
import { chrootEnv, mustRun, requireTool, type Steps } from "./template-exec.js";
import { guestPath, removeTree, treeBytes, withChroot, writeGuestFile } from "./template-fs.js";

export interface Layer {
  /** `<name>-<hash16>`. */
  id: string;
  /** Full sha256 of the layer's inputs. */
  hash: string;
  dir: string;
  rootfs: string;
  cached: boolean;
}

export function layerId(def: TemplateDefinition): string {
  return `${def.name}-${layerHash(def).slice(0, 16)}`;
}

/** Keeps packages installed later (inside a sandbox, or by `run`) as small as the trimmed layer. */
const DPKG_NODOC = `# locale2b: no documentation, man pages or translations in guest images
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
`;

/** Set for debootstrap's second stage and the `run` commands only (a crash there loses only a build). */
const UNSAFE_IO = "/etc/dpkg/dpkg.cfg.d/00-locale2b-unsafe-io";

export interface LayerOptions {
  force?: boolean;
  /** Every line debootstrap and the run commands print. */
  onLine?: (line: string) => void;
}

/** The layer for `def`, built unless cached. Runs two steps on `steps`: debootstrap, and run + trim. */
export async function ensureLayer(def: TemplateDefinition, imagesDir: string, steps: Steps, opts: LayerOptions = {}): Promise<Layer> {
  const hash = layerHash(def);
  const id = `${def.name}-${hash.slice(0, 16)}`;
  const layers = join(imagesDir, "layers");
  const dir = join(layers, id);
  const layer: Layer = { id, hash, dir, rootfs: join(dir, "rootfs"), cached: true };
  const debootstrapTitle = `debootstrap ${def.release} (${def.variant} + ${def.packages.length} packages)`;
  const runTitle = `run ${def.run.length} command${def.run.length === 1 ? "" : "s"} in the chroot, trim`;
  if (opts.force && existsSync(dir)) await removeTree(dir);
  if (existsSync(join(dir, "layer.json"))) {
    await steps.run(debootstrapTitle, async (s) => s.cached(`cached layer ${id}`));
    await steps.run(runTitle, async (s) => s.cached(`cached layer ${id}`));
    return layer;
  }
  const debootstrap = requireTool("debootstrap");
  await mkdir(layers, { recursive: true });
  const tmp = join(layers, `.tmp-${id}-${process.pid}-${randomBytes(3).toString("hex")}`);
  const rootfs = join(tmp, "rootfs");
  const timings: Record<string, number> = {};
  try {
    await mkdir(tmp);
    let t = performance.now();
    await steps.run(debootstrapTitle, async () => {
      const cache = join(layers, ".debs", `${def.name}-${def.release}`);
      await mkdir(cache, { recursive: true });
      const args = [
        ...(def.variant === "default" ? [] : [`--variant=${def.variant}`]),
        ...(def.packages.length ? [`--include=${[...new Set(def.packages)].join(",")}`] : []),
        "--components=main",
        `--cache-dir=${cache}`,
        // Two stages, so dpkg can be told not to fsync every file (and to skip docs) in between: ~115 s -> ~45 s here.
        "--foreign",
        def.release,
        rootfs,
        def.buildMirror,
      ];
      await mustRun(`${debootstrapTitle}: first stage`, debootstrap, args, { onLine: opts.onLine, tailBytes: 6000 });
      await writeGuestFile(rootfs, UNSAFE_IO, { content: "force-unsafe-io\n", mode: 0o644 });
      await writeGuestFile(rootfs, "/etc/dpkg/dpkg.cfg.d/01-locale2b-nodoc", { content: DPKG_NODOC, mode: 0o644 });
      const chroot = requireTool("chroot");
      await mustRun(`${debootstrapTitle}: second stage`, chroot, [rootfs, "/debootstrap/debootstrap", "--second-stage"], {
        env: chrootEnv(),
        onLine: opts.onLine,
        tailBytes: 6000,
      });
    });
    timings.debootstrapSeconds = (performance.now() - t) / 1000;
    t = performance.now();
    await steps.run(runTitle, async () => {
      // debootstrap copies the build host's resolv.conf: not the guest's business (the runtime provides DNS).
      await rm(await guestPath(rootfs, "/etc/resolv.conf"), { force: true });
      await withChroot(rootfs, async (sh) => {
        const u = def.user;
        await sh(
          `create user ${u}`,
          `getent group ${GUEST.uid} >/dev/null || groupadd --gid ${GUEST.uid} ${u}\n` +
            `useradd --uid ${GUEST.uid} --gid ${GUEST.uid} --create-home --home-dir /home/${u} --shell /bin/bash ${u}`,
          { onLine: opts.onLine },
        );
        // Before `run`, whose downloads may pass the same proxy as the host's; kept for the sandboxes.
        if (def.localCAs.cas.length) {
          for (const ca of def.localCAs.cas) await writeGuestFile(rootfs, posix.join(LOCAL_CA_DIR, ca.path), { content: ca.pem, mode: 0o644 });
          await sh(
            `trust ${def.localCAs.cas.length} local CA certificate${def.localCAs.cas.length === 1 ? "" : "s"} of the build host`,
            "if command -v update-ca-certificates >/dev/null; then update-ca-certificates; fi",
            { onLine: opts.onLine },
          );
        }
        for (const [i, command] of def.run.entries()) {
          const first = command.trim().split("\n")[0]!;
          await sh(`run[${i}] (${first.length > 60 ? `${first.slice(0, 57)}...` : first})`, command, { onLine: opts.onLine, tailBytes: 6000 });
        }
        await sh("apt-get clean", "apt-get clean");
      });
      // The image's apt points at the definition's mirror, not a build-time override.
      await writeGuestFile(rootfs, "/etc/apt/sources.list", { content: `deb ${def.mirror} ${def.release} main\n`, mode: 0o644 });
      await rm(await guestPath(rootfs, UNSAFE_IO), { force: true });
      await trim(rootfs);
    });
    timings.runSeconds = (performance.now() - t) / 1000;
    const bytes = await treeBytes(rootfs);
    await writeFile(
      join(tmp, "layer.json"),
      `${JSON.stringify({ id, hash, builtAt: new Date().toISOString(), inputs: layerInputs(def), mirrorUsed: def.buildMirror, bytes, ...timings }, null, 2)}\n`,
    );
    await rename(tmp, dir);
    layer.cached = false;
    return layer;
  } finally {
    await removeTree(tmp);
  }
}

/** Removes what a sandbox does not need: apt lists and caches, docs (copyright kept), man pages, translations, logs. */
async function trim(root: string): Promise<void> {
  const emptyDir = async (rel: string, keep: (name: string) => boolean = () => false) => {
    const dir = join(root, rel);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return;
    }
    for (const n of names) if (!keep(n)) await rm(join(dir, n), { recursive: true, force: true });
  };
  await emptyDir("var/lib/apt/lists", (n) => n === "partial" || n === "lock");
  await emptyDir("var/cache/apt", (n) => n === "archives");
  await emptyDir("var/cache/apt/archives", (n) => n === "partial" || n === "lock");
  await emptyDir("usr/share/man");
  await emptyDir("usr/share/info");
  await emptyDir("usr/share/lintian");
  await emptyDir("usr/share/locale", (n) => n === "locale.alias");
  await emptyDir("usr/lib/locale", (n) => /^C\.utf-?8$/i.test(n));
  await emptyDir("var/log", (n) => n === "apt" || n === "private");
  await emptyDir("var/log/apt");
  await emptyDir("var/cache/debconf", (n) => !n.endsWith("-old"));
  await emptyDir("var/lib/dpkg", (n) => !n.endsWith("-old"));
  await rm(join(root, "var/cache/ldconfig/aux-cache"), { force: true });
  // /usr/share/doc: keep each package's copyright file only.
  const doc = join(root, "usr/share/doc");
  let pkgs: string[] = [];
  try {
    pkgs = await readdir(doc);
  } catch {
    // no docs at all
  }
  for (const pkg of pkgs) {
    const dir = join(doc, pkg);
    const st = await lstat(dir);
    if (!st.isDirectory()) {
      await rm(dir, { force: true });
      continue;
    }
    for (const n of await readdir(dir)) if (n !== "copyright") await rm(join(dir, n), { recursive: true, force: true });
    if ((await readdir(dir)).length === 0) await rmdir(dir);
  }
}
