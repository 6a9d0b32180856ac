// The built templates under <imagesDir>/templates: listing, the `.current`
// marker, pruning old builds, and the per-template build lock.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { open, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { imageHeld } from "./image-refs.js";
import type { TemplateManifest } from "./layout.js";
import { removeTree } from "./template-fs.js";
import { pidAlive } from "../host/pids.js";

/** `<name>-<hash16>`: the exact form of a built template's folder (so `base` never matches `base-python-…`). */
export function templateIdPattern(name: string): RegExp {
  return new RegExp(`^${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}-([0-9a-f]{16})$`);
}

export interface BuiltTemplate {
  name: string;
  hash: string;
  dir: string;
  current: boolean;
  manifest: TemplateManifest;
}

/** Every built template (complete folders with a manifest), newest first. */
export function listBuiltTemplates(imagesDir: string): BuiltTemplate[] {
  const dir = join(imagesDir, "templates");
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const current = new Set(
    names
      .filter((n) => n.endsWith(".current"))
      .map((n) => {
        try {
          return readFileSync(join(dir, n), "utf8").trim();
        } catch {
          return "";
        }
      }),
  );
  const out: BuiltTemplate[] = [];
  for (const n of names) {
    if (n.startsWith(".") || n.endsWith(".current") || n.endsWith(".lock")) continue;
    const m = /^(.+)-([0-9a-f]{16})$/.exec(n);
    if (!m) continue;
    try {
      const manifest = JSON.parse(readFileSync(join(dir, n, "manifest.json"), "utf8")) as TemplateManifest;
      out.push({ name: m[1]!, hash: m[2]!, dir: join(dir, n), current: current.has(n), manifest });
    } catch {
      // incomplete or foreign folder
    }
  }
  return out.sort((a, b) => b.manifest.builtAt.localeCompare(a.manifest.builtAt));
}

/** Points `templates/<name>.current` at `<name>-<hash16>` (atomically). */
export async function setCurrent(imagesDir: string, name: string, id: string): Promise<void> {
  const file = join(imagesDir, "templates", `${name}.current`);
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, `${id}\n`);
  await rename(tmp, file);
}

/**
 * Removes older builds of `name` under `<imagesDir>/<kind>`, keeping the
 * `keep` newest, always `keepId`, and every build a sandbox, a pause to disk
 * or a snapshot still uses (image-refs.ts); returns the removed folders.
 */
export async function pruneBuilds(imagesDir: string, kind: "templates" | "layers", name: string, keepId: string, keep = 2): Promise<string[]> {
  const dir = join(imagesDir, kind);
  const re = templateIdPattern(name);
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => re.test(n));
  } catch {
    return [];
  }
  const byAge = names
    .map((n) => ({ n, t: mtime(join(dir, n)) }))
    .sort((a, b) => b.t - a.t)
    .map((e) => e.n);
  const kept = new Set([keepId, ...byAge.filter((n) => n !== keepId).slice(0, keep - 1)]);
  const removed: string[] = [];
  for (const n of byAge) {
    if (kept.has(n) || imageHeld(join(dir, n))) continue;
    await removeTree(join(dir, n));
    removed.push(n);
  }
  return removed;
}

function mtime(dir: string): number {
  for (const f of ["manifest.json", "layer.json"]) {
    try {
      return statSync(join(dir, f)).mtimeMs;
    } catch {
      // try the next
    }
  }
  try {
    return statSync(dir).mtimeMs;
  } catch {
    return 0;
  }
}

function statSafe(file: string): number | undefined {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

/**
 * Takes `<dir>/<name>.lock` (O_EXCL, holding our pid), waiting while another
 * live process holds it and taking over a lock whose process is gone.
 * Returns the release function.
 */
export async function acquireLock(dir: string, name: string, opts: { timeoutMs?: number; onWait?: (pid: number) => void } = {}): Promise<() => Promise<void>> {
  const file = join(dir, `${name}.lock`);
  const deadline = Date.now() + (opts.timeoutMs ?? 60 * 60_000);
  let told = false;
  for (;;) {
    try {
      const fh = await open(file, "wx");
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
      return async () => {
        const owner = await readFile(file, "utf8").catch(() => "");
        if (owner.trim() === String(process.pid)) await rm(file, { force: true });
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const pid = Number((await readFile(file, "utf8").catch(() => "")).trim());
    if (!Number.isInteger(pid) || pid <= 0) {
      // Being written right now, or its writer died mid-write: stale after a few seconds.
      const age = Date.now() - (statSafe(file) ?? Date.now());
      if (age > 5000) await rm(file, { force: true });
      else await new Promise((r) => setTimeout(r, 50));
      continue;
    }
    if (!pidAlive(pid)) {
      await rm(file, { force: true }); // its builder died
      continue;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for the build of '${name}' by pid ${pid} (${file})`);
    if (!told) {
      opts.onWait?.(pid);
      told = true;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** Removes temporary folders a crashed build of `name` left (their pid is gone). */
export async function removeStaleTemps(dir: string, name: string): Promise<void> {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const n of names) {
    const m = /^\.tmp-(.+)-([0-9a-f]{16})-(\d+)-[0-9a-f]+$/.exec(n);
    if (m && m[1] === name && !pidAlive(Number(m[3]))) await removeTree(join(dir, n));
  }
}
