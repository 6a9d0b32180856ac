// The envd bundle that goes into every guest image at dirname(GUEST.envd):
// envd/cli.ts bundled by esbuild into one ESM file, envd.js, with the native
// modules (node-pty, xattr) beside it in node_modules/. Cached under
// <imagesDir>/envd/<hash16>/, keyed by the sources that go into it.
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { cp, mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { packageRoot } from "../runtimes/paths.js";

/** Bumped when the bundling recipe changes: part of the cache key. */
export const ENVD_BUNDLE_VERSION = 1;
/** Packages with native code: not bundled, copied with their platform packages. */
export const NATIVE_PACKAGES = ["@lydell/node-pty", "@napi-rs/xattr"] as const;
/** Folders whose .ts files may go into the bundle (relative to the package root). */
const SOURCE_DIRS = ["envd", "gen/ts"];
const SOURCE_FILES = ["package-lock.json"];
/** Bundled modules must come from these (or node_modules); anything else is a mistake. */
const ALLOWED_INPUTS = [...SOURCE_DIRS.map((d) => `${d}/`), ...SOURCE_FILES];
const FORBIDDEN_PACKAGES = ["node-sqlite3-wasm", "esbuild", "yaml", "vitest"];

const BANNER = [
  "// locale2b envd bundle (control-plane/images/envd-bundle.ts); entry: envd/cli.ts",
  'import { createRequire as __locale2bCreateRequire } from "node:module";',
  'import { fileURLToPath as __locale2bFileURLToPath } from "node:url";',
  "const require = __locale2bCreateRequire(import.meta.url);",
  "const __filename = __locale2bFileURLToPath(import.meta.url);",
  'const __dirname = __filename.slice(0, __filename.lastIndexOf("/"));',
].join("\n");

export interface EnvdBundle {
  /** The bundle folder: envd.js, package.json, node_modules/. */
  dir: string;
  entry: string;
  hash16: string;
  cached: boolean;
  /** Bytes of envd.js. */
  bytes: number;
}

async function listTs(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await listTs(p)));
    else if (e.isFile() && e.name.endsWith(".ts") && !e.name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

/** sha256 (hex) of everything that decides the bundle: the sources, the lock file, esbuild's version, this recipe. */
export async function envdSourcesHash(root = packageRoot()): Promise<string> {
  const files = [...(await Promise.all(SOURCE_DIRS.map((d) => listTs(join(root, d))))).flat(), ...SOURCE_FILES.map((f) => join(root, f))];
  const h = createHash("sha256");
  h.update(`bundle\0${ENVD_BUNDLE_VERSION}\0esbuild\0${await esbuildVersion(root)}\0${process.platform}-${process.arch}\0`);
  for (const f of files.map((f) => relative(root, f).split(sep).join("/")).sort()) {
    const body = await readFile(join(root, f));
    h.update(`file\0${f}\0${body.length}\0`);
    h.update(body);
  }
  return h.digest("hex");
}

async function esbuildVersion(root: string): Promise<string> {
  try {
    return (JSON.parse(await readFile(join(root, "node_modules", "esbuild", "package.json"), "utf8")) as { version: string }).version;
  } catch {
    throw new Error("esbuild is not installed: run 'npm ci' (the envd bundle needs it)");
  }
}

const inFlight = new Map<string, Promise<EnvdBundle>>();

/** The bundle for the current sources, built into the cache unless it is there already. */
export async function ensureEnvdBundle(imagesDir: string, opts: { force?: boolean; log?: (line: string) => void } = {}): Promise<EnvdBundle> {
  const root = packageRoot();
  if (!existsSync(join(root, "envd", "cli.ts"))) throw new Error(`envd sources not found under ${root}: the envd bundle is built from a source checkout`);
  const hash16 = (await envdSourcesHash(root)).slice(0, 16);
  const dir = join(imagesDir, "envd", hash16);
  const entry = join(dir, "envd.js");
  if (opts.force && existsSync(dir)) await rm(dir, { recursive: true, force: true });
  if (existsSync(entry)) return { dir, entry, hash16, cached: true, bytes: (await stat(entry)).size };
  let p = inFlight.get(dir);
  if (!p) {
    p = buildBundle(root, imagesDir, hash16, opts.log).finally(() => inFlight.delete(dir));
    inFlight.set(dir, p);
  }
  return p;
}

async function buildBundle(root: string, imagesDir: string, hash16: string, log?: (line: string) => void): Promise<EnvdBundle> {
  const esbuild = await import("esbuild");
  const parent = join(imagesDir, "envd");
  const dir = join(parent, hash16);
  await mkdir(parent, { recursive: true });
  const tmp = join(parent, `.tmp-${hash16}-${process.pid}-${randomBytes(3).toString("hex")}`);
  await mkdir(tmp);
  try {
    const result = await esbuild.build({
      absWorkingDir: root,
      entryPoints: [join(root, "envd", "cli.ts")],
      outfile: join(tmp, "envd.js"),
      bundle: true,
      platform: "node",
      target: "node20",
      format: "esm",
      banner: { js: BANNER },
      external: NATIVE_PACKAGES.flatMap((p) => [p, `${p}/*`, `${p}-*`]),
      minifySyntax: true,
      minifyWhitespace: true,
      legalComments: "none",
      metafile: true,
      logLevel: "silent",
    });
    for (const w of result.warnings) log?.(`esbuild: ${w.text}${w.location ? ` (${w.location.file}:${w.location.line})` : ""}`);
    checkInputs(Object.keys(result.metafile.inputs));
    await writeFile(join(tmp, "package.json"), `${JSON.stringify({ name: "locale2b-envd", private: true, type: "module", main: "envd.js" }, null, 2)}\n`);
    const copied = await copyNativePackages(root, join(tmp, "node_modules"));
    await writeFile(join(tmp, "bundle.json"), `${JSON.stringify({ hash16, builtAt: new Date().toISOString(), inputs: Object.keys(result.metafile.inputs).length, native: copied }, null, 2)}\n`);
    try {
      await rename(tmp, dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!((code === "ENOTEMPTY" || code === "EEXIST") && existsSync(join(dir, "envd.js")))) throw err;
      // Another build finished the same bundle first: use theirs.
    }
    const entry = join(dir, "envd.js");
    const bytes = (await stat(entry)).size;
    log?.(`bundled envd ${hash16}: envd.js ${Math.round(bytes / 1024)} KiB + ${copied.join(", ")}`);
    return { dir, entry, hash16, cached: false, bytes };
  } catch (err) {
    const errors = (err as { errors?: Array<{ text: string; location?: { file: string; line: number } | null }> }).errors;
    if (errors?.length) {
      throw new Error(`bundling envd failed:\n${errors.map((e) => `  ${e.location ? `${e.location.file}:${e.location.line}: ` : ""}${e.text}`).join("\n")}`);
    }
    throw err;
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/** Fails when the bundle pulled in code that is not envd's (control plane, SQLite, build tools). */
export function checkInputs(inputs: string[]): void {
  const bad: string[] = [];
  for (const input of inputs) {
    const m = /(?:^|\/)node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
    if (m) {
      if (FORBIDDEN_PACKAGES.includes(m[1]!)) bad.push(input);
      continue;
    }
    if (!ALLOWED_INPUTS.some((a) => (a.endsWith("/") ? input.startsWith(a) : input === a))) bad.push(input);
  }
  if (bad.length) throw new Error(`the envd bundle must hold envd only, but it pulls in: ${bad.join(", ")}`);
}

/** Copies the native packages and the dependencies of theirs that are installed (the platform's binaries). */
async function copyNativePackages(root: string, dest: string): Promise<string[]> {
  const copied: string[] = [];
  const queue: string[] = [...NATIVE_PACKAGES];
  while (queue.length) {
    const name = queue.shift()!;
    if (copied.includes(name)) continue;
    const src = join(root, "node_modules", name);
    if (!existsSync(join(src, "package.json"))) {
      if ((NATIVE_PACKAGES as readonly string[]).includes(name)) throw new Error(`${name} is not installed: run 'npm ci'`);
      continue; // another platform's optional package
    }
    const pkg = JSON.parse(await readFile(join(src, "package.json"), "utf8")) as { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> };
    await mkdir(dirname(join(dest, name)), { recursive: true });
    await cp(src, join(dest, name), { recursive: true, dereference: true, filter: (s) => !/\.(d\.ts|md|map)$/.test(s) || s === src });
    copied.push(name);
    queue.push(...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.optionalDependencies ?? {}));
  }
  return copied;
}
