// The envd bundle that goes into every guest image at dirname(GUEST.envd):
// envd/cli.ts bundled by esbuild into one CommonJS file, envd-main.cjs, with
// the V8 code cache of its start-up (envd-main.cjs.cache, made by running it
// once here) and the loader that uses it as envd.js (envd/loader.ts); the
// native modules (node-pty, xattr) beside them in node_modules/. Cached under
// <imagesDir>/envd/<hash16>/, keyed by what goes into it and nothing else
// (envd-bundle-inputs.ts): the modules esbuild bundled, the versions of the
// packages bundled and copied, the recipe below, Node's version. A cache hit
// hashes the record of the checkout's last build (.last-<root hash>), with no
// esbuild run; a miss bundles in memory first, to learn the key.
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, cp, mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join, relative, sep } from "node:path";
import { createInterface } from "node:readline";
import type { BuildOptions } from "esbuild";
import { packageRoot } from "../runtimes/paths.js";
import { ENVD_CODE_CACHE, ENVD_LOADER, ENVD_MAIN, ENVD_MAIN_HEAD, ENVD_MAIN_TAIL } from "../../envd/loader.js";
import { buildRecorder, bundleKey, recordInputs, type BuildRecord, type BundleInputs, type BundleRecipe } from "./envd-bundle-inputs.js";
import { GUEST } from "./layout.js";

/** Bumped when the bundling changes in a way the recipe does not show. */
export const ENVD_BUNDLE_VERSION = 3;
/** Packages with native code: not bundled, copied with their platform packages. */
export const NATIVE_PACKAGES = ["@lydell/node-pty", "@napi-rs/xattr"] as const;
/** Bundled modules must come from these (or node_modules); anything else is a mistake. */
const ALLOWED_INPUTS = ["envd/", "gen/ts/"];
const FORBIDDEN_PACKAGES = ["node-sqlite3-wasm", "esbuild", "yaml", "vitest"];
/** The bundle's record of its inputs (envd-bundle-inputs.ts), read by the next cache check. */
const INPUTS_FILE = "inputs.json";

const BANNER = [
  "// locale2b envd bundle (control-plane/images/envd-bundle.ts); entry: envd/cli.ts, started by envd.js",
  'const __locale2bImportMetaUrl = require("node:url").pathToFileURL(__filename).href;',
].join("\n");
const BUNDLE_PACKAGE_JSON = `${JSON.stringify({ name: "locale2b-envd", private: true, type: "commonjs", main: "envd.js" }, null, 2)}\n`;

/** esbuild's options, apart from where it reads and writes: all of them are in the cache key. */
export const ENVD_BUILD_OPTIONS = {
  entryPoints: ["envd/cli.ts"],
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  banner: { js: BANNER },
  define: { "import.meta.url": "__locale2bImportMetaUrl" },
  external: NATIVE_PACKAGES.flatMap((p) => [p, `${p}/*`, `${p}-*`]),
  // What tsconfig.json (target ES2022) means for esbuild's output, given here so that no tsconfig.json is read.
  tsconfigRaw: { compilerOptions: { useDefineForClassFields: true } },
  minifySyntax: true,
  minifyWhitespace: true,
  legalComments: "none",
} satisfies BuildOptions;

/** Everything besides the inputs that decides the bundle: its cache key hashes it whole. */
export function envdBundleRecipe(options: BuildOptions = ENVD_BUILD_OPTIONS): BundleRecipe {
  return {
    version: ENVD_BUNDLE_VERSION,
    options,
    written: [ENVD_MAIN_HEAD, ENVD_MAIN_TAIL, ENVD_LOADER, BUNDLE_PACKAGE_JSON],
    // The code cache is V8's: made by running the bundle with this Node and these flags.
    node: process.version,
    nodeFlags: GUEST.nodeFlags,
    // Which platform packages of the native modules are installed.
    platform: `${process.platform}-${process.arch}`,
  };
}

/** How long the run that makes the code cache may take to answer /health and exit. */
const CODE_CACHE_RUN_MS = 30_000;

export interface EnvdBundle {
  /** The bundle folder: envd.js (the loader), envd-main.cjs (+ .cache), package.json, node_modules/, inputs.json. */
  dir: string;
  entry: string;
  hash16: string;
  cached: boolean;
  /** Bytes of the bundled envd (envd-main.cjs). */
  bytes: number;
}

const inFlight = new Map<string, Promise<EnvdBundle>>();

/** The bundle for the current sources, built into the cache unless it is there already. `root`: the checkout (default: this one). */
export async function ensureEnvdBundle(imagesDir: string, opts: { force?: boolean; log?: (line: string) => void; root?: string } = {}): Promise<EnvdBundle> {
  const root = opts.root ?? packageRoot();
  if (!existsSync(join(root, "envd", "cli.ts"))) throw new Error(`envd sources not found under ${root}: the envd bundle is built from a source checkout`);
  const recipe = envdBundleRecipe();
  if (!opts.force) {
    const hit = await recordedBundle(imagesDir, root, recipe);
    if (hit) return hit;
  }
  const key = `${imagesDir}\0${root}`;
  let p = inFlight.get(key);
  if (!p) {
    p = buildBundle(root, imagesDir, recipe, opts).finally(() => inFlight.delete(key));
    inFlight.set(key, p);
  }
  return p;
}

/** Where the checkout at `root` notes the bundle it last used: the record to check first. */
function lastFile(imagesDir: string, root: string): string {
  return join(imagesDir, "envd", `.last-${createHash("sha256").update(root).digest("hex").slice(0, 16)}`);
}

/** The cached bundle keyed by the record of the checkout's last bundle, when that record still holds. */
export async function recordedBundle(imagesDir: string, root: string, recipe = envdBundleRecipe()): Promise<EnvdBundle | undefined> {
  let inputs: BundleInputs;
  try {
    const last = (await readFile(lastFile(imagesDir, root), "utf8")).trim();
    inputs = JSON.parse(await readFile(join(imagesDir, "envd", last, INPUTS_FILE), "utf8")) as BundleInputs;
  } catch {
    return undefined; // none yet, or made before bundles kept their record
  }
  return cachedBundle(imagesDir, bundleKey(root, recipe, inputs).slice(0, 16));
}

async function cachedBundle(imagesDir: string, hash16: string): Promise<EnvdBundle | undefined> {
  const dir = join(imagesDir, "envd", hash16);
  const entry = join(dir, "envd.js");
  if (!existsSync(entry)) return undefined;
  return { dir, entry, hash16, cached: true, bytes: (await stat(join(dir, ENVD_MAIN))).size };
}

async function rememberLast(imagesDir: string, root: string, hash16: string): Promise<void> {
  const file = lastFile(imagesDir, root);
  const tmp = `${file}.${process.pid}-${randomBytes(3).toString("hex")}`;
  await writeFile(tmp, `${hash16}\n`);
  await rename(tmp, file);
}

/**
 * envd bundled by esbuild in memory: its code (esbuild's output, not yet
 * wrapped), the record of what went into it and what its resolver looked at,
 * and envd's modules as esbuild read them.
 */
export async function bundleEnvd(root: string, log?: (line: string) => void): Promise<{ code: Uint8Array; inputs: BundleInputs; loaded: Map<string, Buffer> }> {
  const esbuild = await import("esbuild");
  const record: BuildRecord = { calls: [], loaded: new Map() };
  let result;
  try {
    result = await esbuild.build({
      ...ENVD_BUILD_OPTIONS,
      absWorkingDir: root,
      outfile: join(root, ENVD_MAIN),
      write: false,
      metafile: true,
      logLevel: "silent",
      plugins: [buildRecorder(record)],
    });
  } catch (err) {
    const errors = (err as { errors?: Array<{ text: string; location?: { file: string; line: number } | null }> }).errors;
    if (errors?.length) {
      throw new Error(`bundling envd failed:\n${errors.map((e) => `  ${e.location ? `${e.location.file}:${e.location.line}: ` : ""}${e.text}`).join("\n")}`);
    }
    throw err;
  }
  for (const w of result.warnings) log?.(`esbuild: ${w.text}${w.location ? ` (${w.location.file}:${w.location.line})` : ""}`);
  checkInputs(Object.keys(result.metafile.inputs));
  const rel = (p: string) => relative(root, p).split(sep).join("/");
  const native = (await nativePackages(root)).looked.map((n) => rel(join(root, "node_modules", n)));
  const esbuildDir = dirname(createRequire(import.meta.url).resolve("esbuild/package.json"));
  const external = (spec: string) => NATIVE_PACKAGES.some((p) => spec === p || spec.startsWith(`${p}/`) || spec.startsWith(`${p}-`));
  const inputs = recordInputs(root, result.metafile, record.calls, external, [...native, rel(esbuildDir)]);
  return { code: result.outputFiles[0]!.contents, inputs, loaded: record.loaded };
}

async function buildBundle(root: string, imagesDir: string, recipe: BundleRecipe, opts: { force?: boolean; log?: (line: string) => void }): Promise<EnvdBundle> {
  const { log } = opts;
  const { code, inputs, loaded } = await bundleEnvd(root, log);
  const hash16 = bundleKey(root, recipe, inputs, loaded).slice(0, 16);
  const parent = join(imagesDir, "envd");
  const dir = join(parent, hash16);
  if (opts.force) await rm(dir, { recursive: true, force: true });
  const cached = await cachedBundle(imagesDir, hash16);
  if (cached) {
    // Built before, from another record (another checkout, or before a branch switch).
    await rememberLast(imagesDir, root, hash16);
    return cached;
  }
  await mkdir(parent, { recursive: true });
  const tmp = join(parent, `.tmp-${hash16}-${process.pid}-${randomBytes(3).toString("hex")}`);
  await mkdir(tmp);
  try {
    await writeFile(join(tmp, "package.json"), BUNDLE_PACKAGE_JSON);
    // Wrapped once here, so the loader compiles the file as it reads it (the entry's `#!` line goes).
    const body = Buffer.from(code).toString("utf8").replace(/^#![^\n]*\n/, "");
    await writeFile(join(tmp, ENVD_MAIN), ENVD_MAIN_HEAD + body + ENVD_MAIN_TAIL);
    await writeFile(join(tmp, "envd.js"), ENVD_LOADER);
    await chmod(join(tmp, "envd.js"), 0o755);
    const copied = await copyNativePackages(root, join(tmp, "node_modules"));
    const codeCache = await makeCodeCache(tmp).catch((err: Error) => {
      log?.(`envd bundle: no code cache (${err.message}); envd compiles at each start instead`);
      return 0;
    });
    await writeFile(join(tmp, INPUTS_FILE), `${JSON.stringify(inputs, null, 1)}\n`);
    await writeFile(
      join(tmp, "bundle.json"),
      `${JSON.stringify({ hash16, builtAt: new Date().toISOString(), inputs: inputs.files.length + inputs.packages.length, native: copied, codeCacheBytes: codeCache, node: process.version }, null, 2)}\n`,
    );
    try {
      await rename(tmp, dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (!((code === "ENOTEMPTY" || code === "EEXIST") && existsSync(join(dir, "envd.js")))) throw err;
      // Another build finished the same bundle first: use theirs.
    }
    await rememberLast(imagesDir, root, hash16);
    const entry = join(dir, "envd.js");
    const bytes = (await stat(join(dir, ENVD_MAIN))).size;
    log?.(`bundled envd ${hash16}: ${ENVD_MAIN} ${Math.round(bytes / 1024)} KiB, code cache ${Math.round(codeCache / 1024)} KiB + ${copied.join(", ")}`);
    return { dir, entry, hash16, cached: false, bytes };
  } finally {
    await rm(tmp, { recursive: true, force: true });
  }
}

/**
 * Runs the bundle in `dir` once (as a sandbox does: GUEST.nodeFlags, the
 * loader) until it answers /health, then stops it, and keeps the V8 code
 * cache the loader writes at its exit: what envd compiled for its start-up
 * and its first request. Returns its size.
 */
async function makeCodeCache(dir: string): Promise<number> {
  const out = join(dir, `${ENVD_CODE_CACHE}.tmp`);
  const child = spawn(process.execPath, [...GUEST.nodeFlags, join(dir, "envd.js"), "--listen", "tcp://127.0.0.1:0"], {
    cwd: dir,
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, LOCALE2B_ENVD_CODE_CACHE_OUT: out, LOCALE2B_LOG_LEVEL: "info" },
  });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const timer = setTimeout(() => child.kill("SIGKILL"), CODE_CACHE_RUN_MS);
  try {
    const url = await new Promise<string>((resolve, reject) => {
      // envd logs on stderr, one JSON object per line.
      const lines = createInterface({ input: child.stderr! });
      lines.on("line", (line) => {
        try {
          const rec = JSON.parse(line) as { msg?: string; addresses?: string[] };
          if (rec.msg === "envd listening" && rec.addresses?.[0]) resolve(rec.addresses[0].replace(/^tcp:/, "http:"));
        } catch {
          // not a log line
        }
      });
      void exited.then((code) => reject(new Error(`envd exited (${code}) before it listened: ${stderr.trim()}`)));
    });
    const res = await fetch(`${url}/health`);
    if (res.status !== 204) throw new Error(`envd answered /health with ${res.status}`);
    child.kill("SIGTERM");
    const code = await exited;
    if (code !== 0) throw new Error(`envd exited ${code} when stopped: ${stderr.trim()}`);
    await rename(out, join(dir, ENVD_CODE_CACHE));
    return (await stat(join(dir, ENVD_CODE_CACHE))).size;
  } finally {
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await rm(out, { force: true });
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

/** The native packages and the dependencies of theirs (the platforms' binaries): those installed, and every name looked for. */
async function nativePackages(root: string): Promise<{ installed: string[]; looked: string[] }> {
  const installed: string[] = [];
  const looked: string[] = [];
  const queue: string[] = [...NATIVE_PACKAGES];
  while (queue.length) {
    const name = queue.shift()!;
    if (looked.includes(name)) continue;
    looked.push(name);
    const src = join(root, "node_modules", name);
    if (!existsSync(join(src, "package.json"))) {
      if ((NATIVE_PACKAGES as readonly string[]).includes(name)) throw new Error(`${name} is not installed: run 'npm ci'`);
      continue; // another platform's optional package
    }
    const pkg = JSON.parse(await readFile(join(src, "package.json"), "utf8")) as { dependencies?: Record<string, string>; optionalDependencies?: Record<string, string> };
    installed.push(name);
    queue.push(...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.optionalDependencies ?? {}));
  }
  return { installed, looked };
}

/** Copies the installed native packages into dest; returns their names. */
async function copyNativePackages(root: string, dest: string): Promise<string[]> {
  const { installed } = await nativePackages(root);
  for (const name of installed) {
    const src = join(root, "node_modules", name);
    await mkdir(dirname(join(dest, name)), { recursive: true });
    await cp(src, join(dest, name), { recursive: true, dereference: true, filter: (s) => !/\.(d\.ts|md|map)$/.test(s) || s === src });
  }
  return installed;
}
