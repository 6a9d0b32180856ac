import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import type { TemplateBuildManifest } from "../../control-plane/images/template-build.js";
import { mountsUnder } from "../../control-plane/images/template-fs.js";
import { onCleanup } from "../lib/cleanup.js";
import { CLI } from "../lib/control-plane.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtRatio, heading, printTable } from "../lib/report.js";
import { max, median, min, msSince } from "../lib/stats.js";

// 4. template build time: up to date, on a cached base layer, cold (debootstrap; opt-in)

interface LayerJson {
  id: string;
  builtAt: string;
  debootstrapSeconds?: number;
  runSeconds?: number;
}

const fmtS = (ms: number) => (ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(2)} s`);

/** Runs `locale2b <args>` (the built CLI) to its exit; resolves with the wall time and its output, rejects unless it exits 0. */
function runCli(args: string[]): Promise<{ ms: number; out: string }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, LOCALE2B_LOG_LEVEL: "warn" } });
    const forget = onCleanup(() => child.kill("SIGKILL"));
    let out = "";
    child.stdout!.setEncoding("utf8").on("data", (s: string) => (out += s));
    child.stderr!.setEncoding("utf8").on("data", (s: string) => (out += s));
    child.once("error", (err) => {
      forget();
      reject(err);
    });
    child.once("close", (code) => {
      forget();
      const ms = msSince(t0);
      if (code === 0) resolve({ ms, out });
      else reject(new Error(`locale2b ${args.join(" ")} exited ${code}:\n${out.slice(-2000)}`));
    });
  });
}

/** Removes a temporary images dir, synchronously: first whatever an interrupted build left mounted in it (its chroot's /proc). */
function removeImagesDir(dir: string): void {
  for (const m of mountsUnder(dir)) spawnSync("umount", ["-l", m], { stdio: "ignore" });
  spawnSync("rm", ["-rf", "--one-file-system", "--", dir], { stdio: "ignore" });
  if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
}

/** `cp -a` (owners, modes, device nodes and links kept, as the builder copies a layer). */
function copyTree(from: string, to: string): void {
  const r = spawnSync("cp", ["-a", "--reflink=auto", "--", from, to], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cp -a ${from} ${to}: ${(r.stderr || r.error?.message || "").trim()}`);
}

function tempImagesDir(): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "locale2b-bench-images-"));
  const forget = onCleanup(() => removeImagesDir(dir));
  return {
    dir,
    remove() {
      removeImagesDir(dir);
      forget();
    },
  };
}

function readLayer(imagesDir: string, id: string): LayerJson | undefined {
  try {
    return JSON.parse(readFileSync(join(imagesDir, "layers", id, "layer.json"), "utf8")) as LayerJson;
  } catch {
    return undefined;
  }
}

const steps = (m: TemplateBuildManifest) => {
  const s = m.seconds;
  return ["assemble", "verify", "pack"].map((k) => `${k} ${(s[k] ?? 0).toFixed(1)} s`).join(", ");
};

export async function benchTemplate(imagesDir: string): Promise<GoalResult[]> {
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  const cold = process.env.LOCALE2B_BENCH_VM_COLD === "1";
  heading(`vm 4/5: template build time of \`base\` (locale2b template build, ${reps} repetitions, median; cold build ${cold ? "measured" : "not measured"})`);
  const current = findTemplateImage("base", imagesDir);
  if (!current) throw new Error(`template 'base' is not built in ${imagesDir}: run \`node dist/control-plane/cli/main.js template build base\``);
  const manifest = current.manifest as TemplateBuildManifest;
  const rows: string[][] = [];
  const notes: string[] = [];
  const results: GoalResult[] = [];

  // Up to date: the CLI hashes its inputs (envd bundle, init, Node's memoized hash, the definition) and finds the image.
  const list: number[] = [];
  const upToDate: number[] = [];
  for (let i = 0; i < reps; i++) {
    list.push((await runCli(["template", "list", "--images-dir", imagesDir])).ms);
    const r = await runCli(["template", "build", "base", "--images-dir", imagesDir]);
    if (!r.out.includes("up to date")) throw new Error(`template build base was not up to date in ${imagesDir}:\n${r.out.slice(-1500)}`);
    upToDate.push(r.ms);
  }
  const mList = median(list);
  const row = (name: string, v: number[]) => [name, fmtS(median(v)), `${fmtS(min(v))}..${fmtS(max(v))}`, fmtRatio(median(v) / mList)];
  rows.push(row("`template list` (baseline: the same CLI start-up, reads the manifests)", list));
  rows.push(row("`template build base`, up to date (cached)", upToDate));
  notes.push(`up to date: ${current.dir}`);
  results.push({ benchmark: "vm", metric: "template build base, up to date", value: fmtS(median(upToDate)), goal: "(information)", ok: true });

  // On a cached base layer: a temporary images dir with copies of the layer, the envd bundle and the init binary.
  if (process.getuid?.() !== 0) {
    rows.push(["`template build base` on a cached base layer", "-", "-", "-"]);
    notes.push("on a cached base layer: not measured, building needs root");
  } else {
    const tmp = tempImagesDir();
    try {
      const t0 = performance.now();
      mkdirSync(join(tmp.dir, "layers"));
      copyTree(join(imagesDir, "layers", manifest.layer), join(tmp.dir, "layers", manifest.layer));
      for (const name of ["envd", "init", "node-hash.json"]) if (existsSync(join(imagesDir, name))) copyTree(join(imagesDir, name), join(tmp.dir, name));
      const copyMs = msSince(t0);
      const built: number[] = [];
      let last: TemplateBuildManifest | undefined;
      for (let i = 0; i < reps; i++) {
        removeImagesDir(join(tmp.dir, "templates"));
        // Write back the copy's and the last build's dirty pages first, so no build pays for the one before.
        spawnSync("sync", [], { stdio: "ignore" });
        const r = await runCli(["template", "build", "base", "--images-dir", tmp.dir]);
        if (!r.out.includes("built (base layer cached)")) throw new Error(`template build on a cached layer did not say 'built (base layer cached)':\n${r.out.slice(-1500)}`);
        built.push(r.ms);
        last = findTemplateImage("base", tmp.dir)?.manifest as TemplateBuildManifest | undefined;
      }
      rows.push(row("`template build base` on a cached base layer", built));
      notes.push(`on a cached base layer: last build's steps ${last ? steps(last) : "?"}; copying the layer in took ${fmtS(copyMs)} (not counted)`);
      results.push({ benchmark: "vm", metric: "template build base on a cached layer", value: fmtS(median(built)), goal: "(information)", ok: true });
    } finally {
      tmp.remove();
    }
  }

  // Cold: debootstrap from the network. Opt-in (about a minute, and it downloads the packages).
  const cachedLayer = readLayer(imagesDir, manifest.layer);
  if (cold && process.getuid?.() === 0) {
    const tmp = tempImagesDir();
    try {
      const r = await runCli(["template", "build", "base", "--images-dir", tmp.dir]);
      const m = findTemplateImage("base", tmp.dir)?.manifest as TemplateBuildManifest | undefined;
      const layer = m ? readLayer(tmp.dir, m.layer) : undefined;
      const note = `debootstrap ${layer?.debootstrapSeconds?.toFixed(1) ?? "?"} s, run ${layer?.runSeconds?.toFixed(1) ?? "?"} s; ${m ? steps(m) : "?"}`;
      rows.push(["`template build base`, cold (debootstrap, network; 1 run)", fmtS(r.ms), "-", fmtRatio(r.ms / mList)]);
      notes.push(`cold: ${note}`);
      results.push({ benchmark: "vm", metric: "template build base, cold", value: fmtS(r.ms), goal: "(information)", ok: true });
    } finally {
      tmp.remove();
    }
  } else {
    const s = manifest.seconds;
    const last = cachedLayer
      ? `last measured when the cache's layer was built (${cachedLayer.builtAt}, layer.json): debootstrap ${cachedLayer.debootstrapSeconds?.toFixed(1) ?? "?"} s + run ${cachedLayer.runSeconds?.toFixed(1) ?? "?"} s; ` +
        `the current template's own build (manifest.json): ${s.total?.toFixed(1) ?? "?"} s in all, of which the layer ${s.layer?.toFixed(1) ?? "?"} s`
      : "no layer.json in the cache";
    rows.push(["`template build base`, cold (debootstrap, network)", "-", "-", "-"]);
    notes.push(`cold: not measured this run (set LOCALE2B_BENCH_VM_COLD=1); ${last}`);
  }

  printTable(["variant", "median", "min..max", "/ list"], rows);
  for (const n of notes) console.log(n);
  console.log(
    "Wall time of the CLI (`node dist/control-plane/cli/main.js template …`), spawn to exit, so it includes node's start-up.\n" +
      "On a cached base layer: a temporary images dir holding copies of the cache's base layer, envd bundle and init binary,\n" +
      "whose templates/ is emptied (then `sync`) before each build: the build copies the layer, adds Node, envd and the init,\n" +
      "verifies them in a chroot and packs rootfs.ext4 (the steps' seconds are from the new manifest). Cold adds debootstrap,\n" +
      "which downloads packages.",
  );
  return results;
}
