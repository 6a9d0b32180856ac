// Template definitions: rootfs/templates/<name>.yaml, a short declarative
// description of a guest image (Debian release, packages, commands run in
// the chroot, extra files). Parsed strictly: an unknown key or a wrong type
// is an error that names the file, the key and what was expected.
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { basename, dirname, extname, isAbsolute, join, posix, resolve } from "node:path";
import { parseDocument } from "yaml";
import { packageRoot } from "../runtimes/paths.js";
import { runtimeNames } from "../runtimes/registry.js";
import { GUEST } from "./layout.js";
import { localCADir, readLocalCAs, type LocalCAs } from "./local-cas.js";
import { setting } from "../settings.js";

export const DEFAULT_MIRROR = "http://deb.debian.org/debian";
export const DEFAULT_DISK_SIZE_MB = 1024;
export const VARIANTS = ["minbase", "buildd", "default"] as const;
/** Bumped when the layer recipe (user creation, trimming, sources.list) changes: part of the layer hash. */
export const LAYER_VERSION = 2;

export interface TemplateFile {
  /** Absolute path inside the guest. */
  path: string;
  /** Literal content, or... */
  content?: string;
  /** ...a host file, resolved against the definition's folder. */
  from?: string;
  mode: number;
}

/** A global npm package for the user's Node, at an exact version (`npm@10.9.9`, `@scope/x@1.2.3`). */
export interface NpmPackage {
  name: string;
  version: string;
  /** `name@version`. */
  spec: string;
}

export interface TemplateDefinition {
  name: string;
  /** The yaml file it came from. */
  source: string;
  description?: string;
  release: string;
  variant: (typeof VARIANTS)[number];
  /** The mirror written into the image's sources.list. */
  mirror: string;
  /** The mirror debootstrap and `run` use: $LOCALE2B_DEBIAN_MIRROR, else `mirror`. */
  buildMirror: string;
  packages: string[];
  run: string[];
  files: TemplateFile[];
  diskSizeMB: number;
  /** The sandbox user (uid/gid GUEST.uid, home /home/<user>, shell /bin/bash). */
  user: string;
  /** The runtime sandboxes of this template run on by default (else the server's --runtime); one of runtimes/registry.ts. */
  runtime?: string;
  /** E2B's start command: run in the background in every new sandbox of the template, as its user. */
  start?: string;
  /** E2B's ready command: a create answers once it exits 0 (default with a start command: E2B's `sleep 20`). */
  ready?: string;
  /**
   * `node:`: the server's Node for the sandbox's user at /usr/local/bin/node (envd has its own
   * at GUEST.node either way), with `packages` installed globally from the npm registry.
   */
  node?: { packages: NpmPackage[] };
  /** The build host's locally added CA certificates ($LOCALE2B_IMAGE_CA_DIR): trusted in the image. */
  localCAs: LocalCAs;
}

export class DefinitionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DefinitionError";
  }
}

const KEYS = ["description", "release", "variant", "mirror", "packages", "run", "files", "diskSizeMB", "user", "runtime", "node", "start", "ready"] as const;
const FILE_KEYS = ["path", "content", "from", "mode"] as const;
const NAME_RE = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
const PACKAGE_RE = /^[a-z0-9][a-z0-9+.-]+$/;
const USER_RE = /^[a-z_][a-z0-9_-]{0,31}$/;
/** An npm package name (scoped or not) at an exact version: what `npm pack` fetches the same every time. */
const NPM_SPEC_RE = /^((?:@[a-z0-9][a-z0-9._~-]*\/)?[a-z0-9][a-z0-9._~-]*)@(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$/;

/** rootfs/templates in this package. */
export function templatesSourceDir(): string {
  return join(packageRoot(), "rootfs", "templates");
}

/** A template name (rootfs/templates/<name>.yaml) or a path to a yaml file. */
export function findDefinitionFile(nameOrPath: string, cwd = process.cwd()): string {
  const looksLikePath = /[/\\]/.test(nameOrPath) || /\.ya?ml$/i.test(nameOrPath);
  if (looksLikePath) {
    const file = resolve(cwd, nameOrPath);
    if (!existsSync(file)) throw new DefinitionError(`template definition ${file} not found`);
    return file;
  }
  if (!NAME_RE.test(nameOrPath)) throw new DefinitionError(`invalid template name '${nameOrPath}': use lowercase letters, digits, '.', '_' and '-'`);
  for (const ext of [".yaml", ".yml"]) {
    const file = join(templatesSourceDir(), nameOrPath + ext);
    if (existsSync(file)) return file;
  }
  throw new DefinitionError(`no template '${nameOrPath}': ${join(templatesSourceDir(), `${nameOrPath}.yaml`)} does not exist`);
}

export function loadDefinition(nameOrPath: string, env: NodeJS.ProcessEnv = process.env): TemplateDefinition {
  const file = findDefinitionFile(nameOrPath);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new DefinitionError(`${file}: cannot read: ${(err as Error).message}`);
  }
  return parseDefinition(text, file, env);
}

/** Levenshtein distance, for "did you mean" hints on unknown keys. */
function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1]!.toLowerCase() === b[j - 1]!.toLowerCase() ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length]!;
}

function describe(v: unknown): string {
  if (v === undefined) return "nothing";
  if (v === null) return "null";
  if (Array.isArray(v)) return "a list";
  if (typeof v === "object") return "a mapping";
  if (typeof v === "string") return `the string ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v)}`;
  return `${typeof v} ${String(v)}`;
}

/** Parses and validates a definition; `file` names it in errors and gives the template its name. */
export function parseDefinition(text: string, file: string, env: NodeJS.ProcessEnv = process.env): TemplateDefinition {
  const name = basename(file, extname(file));
  const fail = (key: string, expected: string, ...got: unknown[]): never => {
    throw new DefinitionError(`${file}: '${key}': expected ${expected}${got.length ? `, got ${describe(got[0])}` : ""}`);
  };
  if (!NAME_RE.test(name)) throw new DefinitionError(`${file}: the file name gives the template name '${name}': use lowercase letters, digits, '.', '_' and '-'`);
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length) {
    const e = doc.errors[0]!;
    throw new DefinitionError(`${file}: YAML error: ${e.message.split("\n")[0]}`);
  }
  const raw: unknown = doc.toJS();
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new DefinitionError(`${file}: expected a mapping of keys (release, packages, ...), got ${describe(raw)}`);
  const obj = raw as Record<string, unknown>;
  for (const key of Object.keys(obj)) {
    if ((KEYS as readonly string[]).includes(key)) continue;
    const near = KEYS.find((k) => distance(k, key) <= 2);
    throw new DefinitionError(`${file}: unknown key '${key}'${near ? ` (did you mean '${near}'?)` : ""}; known keys: ${KEYS.join(", ")}`);
  }

  const str = (key: string, v: unknown, re?: RegExp, what = "a string"): string => {
    if (typeof v !== "string" || v === "" || (re && !re.test(v))) fail(key, what, v);
    return v as string;
  };
  const list = (key: string, v: unknown, what: string): unknown[] => {
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) fail(key, `a list of ${what}`, v);
    return v as unknown[];
  };

  const description = obj.description === undefined ? undefined : str("description", obj.description);
  const release = obj.release === undefined ? "bookworm" : str("release", obj.release, /^[a-z][a-z0-9-]*$/, "a Debian release name such as bookworm");
  const variant = obj.variant === undefined ? "minbase" : str("variant", obj.variant);
  if (!(VARIANTS as readonly string[]).includes(variant)) fail("variant", `one of ${VARIANTS.join(", ")}`, variant);
  const mirror = obj.mirror === undefined ? DEFAULT_MIRROR : str("mirror", obj.mirror, /^https?:\/\/\S+$/, "an http:// or https:// URL");
  const override = setting("LOCALE2B_DEBIAN_MIRROR", env);
  if (override !== undefined && override !== "" && !/^(https?|file):\/\/\S+$/.test(override)) {
    throw new DefinitionError(`LOCALE2B_DEBIAN_MIRROR: expected an http://, https:// or file:// URL, got ${JSON.stringify(override)}`);
  }
  const packages = list("packages", obj.packages, "Debian package names").map((p, i) =>
    str(`packages[${i}]`, p, PACKAGE_RE, "a Debian package name (lowercase letters, digits, '+', '-', '.')"),
  );
  const run = list("run", obj.run, "shell commands").map((c, i) => str(`run[${i}]`, c, /\S/, "a shell command (a non-empty string)"));
  const files = list("files", obj.files, "{path, content | from, mode} mappings").map((f, i) => parseFile(f, `files[${i}]`, file, fail));
  let diskSizeMB = DEFAULT_DISK_SIZE_MB;
  if (obj.diskSizeMB !== undefined) {
    const n = obj.diskSizeMB;
    if (typeof n !== "number" || !Number.isInteger(n) || n < 64 || n > 1024 * 1024) fail("diskSizeMB", "a whole number of MiB from 64 to 1048576", n);
    diskSizeMB = n as number;
  }
  const user = obj.user === undefined ? GUEST.user : str("user", obj.user, USER_RE, "a user name (lowercase letters, digits, '_', '-')");
  if (user === "root") fail("user", "a user other than root (the sandbox user is unprivileged)", user);
  const runtime = obj.runtime === undefined ? undefined : str("runtime", obj.runtime);
  if (runtime !== undefined && !runtimeNames().includes(runtime)) fail("runtime", `one of ${runtimeNames().join(", ")}`, runtime);
  const node = obj.node === undefined ? undefined : parseNode(obj.node, file, fail);
  const start = obj.start === undefined ? undefined : str("start", obj.start);
  const ready = obj.ready === undefined ? undefined : str("ready", obj.ready);
  if (ready !== undefined && start === undefined) fail("ready", "a ready command only with a start command (add `start:`)", ready);

  return {
    name,
    source: file,
    ...(description !== undefined ? { description } : {}),
    release,
    variant: variant as TemplateDefinition["variant"],
    mirror,
    buildMirror: override || mirror,
    packages,
    run,
    files,
    diskSizeMB,
    user,
    ...(runtime !== undefined ? { runtime: runtime as TemplateDefinition["runtime"] } : {}),
    ...(node ? { node } : {}),
    ...(start !== undefined ? { start } : {}),
    ...(ready !== undefined ? { ready } : {}),
    localCAs: readLocalCAs(localCADir(env)),
  };
}

/** `node: {packages: [name@x.y.z, ...]}` (`node: {}` for Node without packages). */
function parseNode(v: unknown, file: string, fail: (key: string, expected: string, ...got: unknown[]) => never): { packages: NpmPackage[] } {
  if (v === null || typeof v !== "object" || Array.isArray(v)) fail("node", "a mapping {packages: [name@version, ...]} ({} for Node alone)", v);
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (k !== "packages") throw new DefinitionError(`${file}: unknown key 'node.${k}'; known keys: packages`);
  }
  if (o.packages !== undefined && o.packages !== null && !Array.isArray(o.packages)) fail("node.packages", "a list of npm packages at exact versions (name@x.y.z)", o.packages);
  const seen = new Set<string>();
  const packages = ((o.packages ?? []) as unknown[]).map((p, i): NpmPackage => {
    const m = typeof p === "string" ? NPM_SPEC_RE.exec(p) : null;
    if (!m) fail(`node.packages[${i}]`, "an npm package at an exact version, such as npm@10.9.9 (name@x.y.z)", p);
    const [spec, name, version] = m as RegExpExecArray as unknown as [string, string, string];
    if (seen.has(name)) fail(`node.packages[${i}]`, `each package once (${name} is listed twice)`, p);
    seen.add(name);
    return { name, version, spec };
  });
  return { packages };
}

function parseFile(v: unknown, key: string, file: string, fail: (key: string, expected: string, ...got: unknown[]) => never): TemplateFile {
  if (v === null || typeof v !== "object" || Array.isArray(v)) fail(key, "a mapping {path, content | from, mode}", v);
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!(FILE_KEYS as readonly string[]).includes(k)) throw new DefinitionError(`${file}: unknown key '${key}.${k}'; known keys: ${FILE_KEYS.join(", ")}`);
  }
  const path = o.path;
  if (typeof path !== "string" || !path.startsWith("/") || path.endsWith("/") || path.split("/").some((c) => c === ".." || c === ".")) {
    fail(`${key}.path`, "an absolute path inside the guest, without '.' or '..', not ending in '/'", path);
  }
  const normalized = posix.normalize(path as string);
  if (normalized === "/") fail(`${key}.path`, "a file path, not /", path);
  if ((o.content === undefined) === (o.from === undefined)) fail(key, "exactly one of 'content' or 'from'");
  if (o.content !== undefined && typeof o.content !== "string") fail(`${key}.content`, "a string", o.content);
  let from: string | undefined;
  if (o.from !== undefined) {
    if (typeof o.from !== "string" || o.from === "") fail(`${key}.from`, "a path to a host file (relative to the definition)", o.from);
    from = isAbsolute(o.from as string) ? (o.from as string) : resolve(dirname(file), o.from as string);
    if (!existsSync(from)) throw new DefinitionError(`${file}: '${key}.from': ${from} does not exist`);
  }
  return {
    path: normalized,
    ...(o.content !== undefined ? { content: o.content as string } : {}),
    ...(from !== undefined ? { from } : {}),
    mode: parseMode(o.mode, `${key}.mode`, fail),
  };
}

/** `"0755"`, `"755"` or 755 (YAML reads an unquoted 0755 as decimal 755: its digits are taken as octal). */
function parseMode(v: unknown, key: string, fail: (key: string, expected: string, ...got: unknown[]) => never): number {
  if (v === undefined) return 0o644;
  const s = typeof v === "number" && Number.isInteger(v) ? String(v) : typeof v === "string" ? v.replace(/^0o/, "") : undefined;
  if (s === undefined || !/^[0-7]{3,4}$/.test(s)) fail(key, "an octal file mode such as \"0755\" or \"644\"", v);
  return parseInt(s as string, 8);
}

function sha256(value: unknown): string {
  return createHash("sha256").update(JSON.stringify(value)).digest("hex");
}

/** What the base layer depends on, normalized (package order and duplicates do not matter). */
export function layerInputs(def: TemplateDefinition): Record<string, unknown> {
  return {
    layerVersion: LAYER_VERSION,
    release: def.release,
    variant: def.variant,
    // The definition's mirror ends up in sources.list; $LOCALE2B_DEBIAN_MIRROR only changes where packages come from.
    mirror: def.mirror,
    packages: [...new Set(def.packages)].sort(),
    run: def.run,
    user: def.user,
    // Only when there are some: layers of hosts without local CAs keep the hash they had.
    ...(def.localCAs.cas.length ? { localCAs: def.localCAs.cas.map((c) => ({ path: c.path, sha256: c.sha256 })) } : {}),
  };
}

/** sha256 (hex) of the layer's inputs. */
export function layerHash(def: TemplateDefinition): string {
  return sha256(layerInputs(def));
}

/** The template's own parts (files, disk size), for the template hash; `from` files by content. */
export function templateInputs(def: TemplateDefinition): Record<string, unknown> {
  return {
    ...(def.runtime ? { runtime: def.runtime } : {}),
    ...(def.start !== undefined ? { start: def.start, ready: def.ready ?? null } : {}),
    ...(def.node ? { node: { packages: def.node.packages.map((p) => p.spec) } } : {}),
    diskSizeMB: def.diskSizeMB,
    files: def.files.map((f) => ({
      path: f.path,
      mode: f.mode,
      sha256: createHash("sha256")
        .update(f.content !== undefined ? f.content : readFileSync(f.from!))
        .digest("hex"),
    })),
  };
}

/** The definition as recorded in manifest.json (no host-specific fields). */
export function definitionForManifest(def: TemplateDefinition): Record<string, unknown> {
  const { buildMirror: _b, source, files, localCAs, node, ...rest } = def;
  return {
    ...rest,
    source: basename(source),
    files: files.map((f) => ({ path: f.path, mode: `0${f.mode.toString(8)}`, ...(f.from ? { from: basename(f.from) } : { bytes: Buffer.byteLength(f.content ?? "") }) })),
    ...(node ? { node: { packages: node.packages.map((p) => p.spec) } } : {}),
    localCAs: localCAs.cas.map((c) => c.path),
  };
}
