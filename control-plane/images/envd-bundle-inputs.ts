// What the envd bundle is made of, as recorded from the build that made it
// (esbuild's metafile and every lookup its resolver was asked for), and the
// cache key: a hash of the build's recipe, of that record, and of what each
// recorded thing is now. On a cache hit the key is computed from the last
// build's record, without running esbuild.
//
// Why the last record is enough. esbuild's output is a function of its
// options (the recipe, hashed as a whole) and of what it reads: the bytes of
// each module and the file system's answer to each lookup of its resolver.
// The record holds all of it:
//  - files: envd's own modules (envd/, gen/ts/) that went in, by their bytes;
//  - packages: each node_modules/<name> folder the resolver looked at for a
//    bare import, from the importing folder upward to the one it took (to /
//    when none): what is there, name@version or nothing. A version stands for
//    its files (npm installs them as published; a hand edit inside
//    node_modules needs `--force`). The native packages copied beside the
//    bundle and esbuild itself are recorded the same way;
//  - names: for each relative import, the names beside its target it could
//    resolve to (`./x.js`: x.js, x.ts, x.tsx, a folder x.js/…);
//  - manifests: the package.json nearest each of envd's modules (its module
//    type and side effects), or that there is none nearer.
// tsconfig.json files are not read: the recipe gives esbuild their settings.
// By induction from the entry: if nothing recorded changed, each module has
// the same bytes, so the same imports; each import gets the same answers
// from the same lookups, so the same modules: the graph, and the output, are
// the same. A new import changes its file's bytes; a file that would shadow
// a module (a nearer node_modules/<name>, an x.ts beside x.js) is a lookup
// in the record. Anything else (the other gen/ts files, package.json's
// dependencies, the lock file, packages envd does not import) is never
// looked at by the build, so it cannot change the bundle and is not hashed.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { isBuiltin } from "node:module";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import type { Metafile, Plugin } from "esbuild";

/** All paths relative to the package root, '/'-separated (`../` above it). */
export interface BundleInputs {
  files: string[];
  packages: string[];
  /** [folder, stem]: the entries of folder named stem or stem.* */
  names: Array<[string, string]>;
  manifests: string[];
}

/** What a bundle is built with besides its inputs: options, esbuild's TypeScript settings, what is written around its output, the Node that makes its code cache. */
export type BundleRecipe = Record<string, unknown>;

/** The package.json fields esbuild reads for a module outside node_modules. */
const MANIFEST_FIELDS = ["name", "type", "main", "module", "browser", "exports", "imports", "sideEffects"];

export interface ResolveCall {
  path: string;
  importer: string;
  resolveDir: string;
  kind: string;
}

/** What a build read and asked: its imports (resolved as usual), and envd's TypeScript modules as it loaded them (absolute path → bytes). */
export interface BuildRecord {
  calls: ResolveCall[];
  loaded: Map<string, Buffer>;
}

/**
 * An esbuild plugin that notes each import the resolver is asked for (the
 * build resolves it as usual) and reads envd's TypeScript modules for the
 * build, so that the key hashes the very bytes bundled (a file saved during
 * the build cannot give the old bundle the new key).
 */
export function buildRecorder(record: BuildRecord): Plugin {
  return {
    name: "locale2b-record-build",
    setup(build) {
      build.onResolve({ filter: /.*/ }, ({ path, importer, resolveDir, kind }) => {
        record.calls.push({ path, importer, resolveDir, kind });
        return undefined;
      });
      build.onLoad({ filter: /\.[cm]?tsx?$/ }, async ({ path }) => {
        if (packageDirOf(path)) return undefined;
        const contents = await readFile(path);
        record.loaded.set(path, contents);
        return { contents, loader: path.endsWith("x") ? "tsx" : "ts" };
      });
    },
  };
}

/** The folder of the package a path is in (…/node_modules/<name> or …/node_modules/@scope/<name>), if any. */
export function packageDirOf(path: string): string | undefined {
  return /^(.*(?:^|\/)node_modules\/(?:@[^/]+\/)?[^/]+)(?:\/|$)/.exec(path)?.[1];
}

/** The package a bare import names: `pino/lib/x` → pino, `@a/b/c` → @a/b. */
function packageName(spec: string): string {
  const parts = spec.split("/");
  return parts.slice(0, spec.startsWith("@") ? 2 : 1).join("/");
}

/**
 * The record of a build from its metafile and the imports it resolved.
 * `external(spec)`: imports left to Node at run time; `extraPackages`: other
 * package folders the bundle depends on (relative to the root).
 */
export function recordInputs(root: string, metafile: Metafile, calls: ResolveCall[], external: (spec: string) => boolean, extraPackages: string[]): BundleInputs {
  const rel = (p: string) => relative(root, p).split(sep).join("/") || ".";
  const files = new Set<string>();
  const packages = new Set<string>(extraPackages);
  const names = new Map<string, [string, string]>();
  const manifests = new Set<string>();
  /** importer + import as written → the module it resolved to (relative to the root). */
  const resolvedAt = new Map<string, string>();
  for (const [input, { imports }] of Object.entries(metafile.inputs)) {
    for (const i of imports) if (i.original !== undefined && !i.external) resolvedAt.set(`${input}\0${i.original}`, i.path);
  }
  for (const input of Object.keys(metafile.inputs)) {
    const pkg = packageDirOf(input);
    if (pkg) {
      packages.add(pkg);
      continue;
    }
    files.add(input);
    for (let d = dirname(resolve(root, input)); ; d = dirname(d)) {
      manifests.add(rel(join(d, "package.json")));
      if (existsSync(join(d, "package.json")) || dirname(d) === d) break;
    }
  }
  for (const c of calls) {
    if (c.kind === "entry-point" || isBuiltin(c.path) || external(c.path)) continue;
    if (c.path.startsWith("#")) throw new Error(`${c.importer} imports ${c.path}: package.json "imports" are not followed by the envd bundle's cache key`);
    if (c.path.startsWith(".") || c.path.startsWith("/")) {
      const target = resolve(c.resolveDir, c.path);
      const own = packageDirOf(c.importer);
      if (own && target.startsWith(`${own}/`)) continue; // inside a package: its version stands for it
      const stem = basename(target).replace(/\.[cm]?jsx?$/, "");
      names.set(`${rel(dirname(target))}\0${stem}`, [rel(dirname(target)), stem]);
      if (statSync(target, { throwIfNoEntry: false })?.isDirectory()) {
        names.set(`${rel(target)}\0`, [rel(target), ""]);
        manifests.add(rel(join(target, "package.json")));
      }
      continue;
    }
    // A bare import: node_modules/<name> in each folder from the importer's up, to the one it came from (to / if none).
    const name = packageName(c.path);
    const resolved = resolvedAt.get(`${rel(c.importer)}\0${c.path}`);
    const from = resolved === undefined ? undefined : packageDirOf(resolved);
    for (let d = c.resolveDir; ; d = dirname(d)) {
      if (basename(d) !== "node_modules") {
        const candidate = rel(join(d, "node_modules", name));
        packages.add(candidate);
        if (candidate === from) break;
      }
      if (dirname(d) === d) break;
    }
  }
  const sorted = (s: Iterable<string>) => [...s].sort();
  return {
    files: sorted(files),
    packages: sorted(packages),
    names: sorted(names.keys()).map((k) => names.get(k)!),
    manifests: sorted(manifests),
  };
}

/**
 * sha256 (hex) of the recipe, the record, and the current state of
 * everything recorded. Synchronous on purpose: a few hundred small reads and
 * stats, most of them of things not there, cost a few ms this way and
 * several times that through the thread pool; it runs once per template
 * build and server start.
 */
export function bundleKey(root: string, recipe: BundleRecipe, inputs: BundleInputs, loaded?: Map<string, Buffer>): string {
  const look = new Looker(root, loaded);
  const h = createHash("sha256");
  h.update(`recipe\0${JSON.stringify(recipe)}\0`);
  for (const f of inputs.files) {
    const body = look.read(f);
    h.update(`file\0${f}\0${body ? body.length : "missing"}\0`);
    if (body) h.update(body);
  }
  for (const p of inputs.packages) h.update(`package\0${p}\0${look.packageState(p)}\0`);
  for (const [dir, stem] of inputs.names) {
    const names = look.listing(dir).filter((n) => stem === "" || n === stem || n === `${stem}/` || n.startsWith(`${stem}.`));
    h.update(`names\0${dir}\0${stem}\0${names.join("/")}\0`);
  }
  for (const m of inputs.manifests) h.update(`manifest\0${m}\0${look.manifestState(m)}\0`);
  return h.digest("hex");
}

/** The file system's answers, each asked once: most recorded lookups are of things that are not there, under folders that are not there either. */
class Looker {
  private readonly listings = new Map<string, string[]>();
  private readonly kinds = new Map<string, "file" | "folder" | undefined>();
  /** loaded: files as a build read them (absolute path → bytes), hashed instead of what is on disk now. */
  constructor(
    private readonly root: string,
    private readonly loaded?: Map<string, Buffer>,
  ) {}

  read(path: string): Buffer | undefined {
    const seen = this.loaded?.get(resolve(this.root, path));
    if (seen) return seen;
    try {
      return readFileSync(resolve(this.root, path));
    } catch {
      return undefined;
    }
  }

  /** The entries of a folder (folders with a trailing /), [] when there is none. */
  listing(dir: string): string[] {
    let l = this.listings.get(dir);
    if (!l) {
      try {
        l = readdirSync(resolve(this.root, dir), { withFileTypes: true })
          .map((e) => (e.isDirectory() ? `${e.name}/` : e.name))
          .sort();
      } catch {
        l = [];
      }
      this.listings.set(dir, l);
    }
    return l;
  }

  /** What is at path (links followed); a path under a folder that is not there is not asked for. */
  kind(path: string): "file" | "folder" | undefined {
    if (this.kinds.has(path)) return this.kinds.get(path);
    const up = dirname(path);
    let k: "file" | "folder" | undefined;
    if (up === path || up === "." || up.endsWith("..") || this.kind(up) === "folder") {
      const st = statSync(resolve(this.root, path), { throwIfNoEntry: false });
      k = st ? (st.isDirectory() ? "folder" : "file") : undefined;
    }
    this.kinds.set(path, k);
    return k;
  }

  /** name@version of the package in a folder; "folder" without a package.json; "-" when nothing is there. */
  packageState(dir: string): string {
    if (this.kind(dir) !== "folder") return "-";
    try {
      const pkg = JSON.parse(readFileSync(resolve(this.root, dir, "package.json"), "utf8")) as { name?: string; version?: string };
      return `${pkg.name}@${pkg.version}`;
    } catch {
      return "folder";
    }
  }

  /** The fields of a package.json that esbuild reads; "-" when there is none. */
  manifestState(file: string): string {
    if (this.kind(dirname(file)) !== "folder") return "-";
    const text = this.read(file)?.toString("utf8");
    if (text === undefined) return "-";
    try {
      const pkg = JSON.parse(text) as Record<string, unknown>;
      return JSON.stringify(MANIFEST_FIELDS.map((f) => pkg[f] ?? null));
    } catch {
      return `unparsable ${createHash("sha256").update(text).digest("hex")}`;
    }
  }
}
