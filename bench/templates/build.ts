import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Template, type TemplateClass } from "e2b";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtRatio, heading, printTable } from "../lib/report.js";
import { median, quantile } from "../lib/stats.js";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { benchImagesDir, buildLog, imageNote, missing, startTemplateServer, type BuildLogEntry, type TemplateServer } from "./server.js";

// 1. A template build (fromTemplate('base') + apt + pip + copy) with the real
// JS Template SDK, cold and unchanged, against the same commands in a plain
// `base` sandbox; and where the build's time goes, from its log.

const APT_PACKAGE = "tree"; // small, not in base, no dependencies base lacks
const PIP_PACKAGE = "six"; // one small pure-Python wheel
const APT_CMD = `apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y ${APT_PACKAGE}`; // what aptInstall runs
const PIP_CMD = `pip install ${PIP_PACKAGE}`; // what pipInstall runs (as root)
const FOLDER = "/home/user/app";
const FILES = 32;

/** The folder COPY sends: FILES small files in two directories, one of them carrying the run's marker. */
function makeFolder(root: string, marker: string): { path: string; data: string }[] {
  const files: { path: string; data: string }[] = [];
  for (let i = 0; i < FILES; i++) {
    const rel = `${i % 2 ? "lib/" : ""}file-${i}.txt`;
    files.push({ path: rel, data: `${marker} ${i}\n${"x".repeat(2048)}\n` });
  }
  mkdirSync(join(root, "app", "lib"), { recursive: true });
  for (const f of files) writeFileSync(join(root, "app", f.path), f.data);
  return files;
}

/** Seconds each part of a build took, from its log's timestamps (NaN where the build had no such part). */
export interface BuildPhases {
  /** The SDK's calls until the server logged the build as queued: template, file hashes, upload, start. */
  sdk: number;
  /** `from template base` until the first step that ran (or the export): starting the build sandbox. */
  sandbox: number;
  /** Each step: its first log line until the next step's (or the export's); NaN for a CACHED one. */
  steps: number[];
  cachedSteps: number;
  /** The finished root exported from the sandbox into a new image. */
  export: number;
  /** The start command and ready command checked on a sandbox of the new image. */
  startCheck: number;
  /** `template image ready` until `build ready`, then until Template.build returned (the SDK polls). */
  finish: number;
  total: number;
}

export function buildPhases(log: BuildLogEntry[], t0: number, t1: number, stepCount: number): BuildPhases {
  const at = (e: BuildLogEntry | undefined) => (e ? Date.parse(e.timestamp) : NaN);
  const find = (f: (e: BuildLogEntry) => boolean) => log.find(f);
  const queued = at(find((e) => / queued$/.test(e.message)));
  const base = at(find((e) => e.step === "base"));
  const exporting = at(find((e) => e.message === "exporting the template's files"));
  const check = at(find((e) => e.message.startsWith("checking the start command")));
  const ready = at(find((e) => e.message.startsWith("template image ready")));
  const heads = Array.from({ length: stepCount }, (_, i) => find((e) => e.step === String(i + 1)));
  const ran = heads.map((h) => (h && !h.message.startsWith("CACHED ") ? at(h) : NaN));
  const firstRan = ran.find((t) => !Number.isNaN(t)) ?? exporting;
  const steps = ran.map((t, i) => {
    if (Number.isNaN(t)) return NaN;
    const next = ran.slice(i + 1).find((u) => !Number.isNaN(u)) ?? exporting;
    return (next - t) / 1000;
  });
  return {
    sdk: (queued - t0) / 1000,
    sandbox: (firstRan - base) / 1000,
    steps,
    cachedSteps: heads.filter((h) => h?.message.startsWith("CACHED ")).length,
    export: ((Number.isNaN(check) ? ready : check) - exporting) / 1000,
    startCheck: Number.isNaN(check) ? NaN : (ready - check) / 1000,
    finish: (t1 - ready) / 1000,
    total: (t1 - t0) / 1000,
  };
}

/** A build with the SDK: its wall time and its phases. */
export async function timedBuild(s: TemplateServer, template: TemplateClass, name: string, stepCount: number): Promise<BuildPhases & { templateId: string; warnings: string[] }> {
  const t0 = Date.now();
  const info = await Template.build(template, name, { ...s.conn });
  const t1 = Date.now();
  s.track(info.templateId);
  const log = await buildLog(s, info.templateId, info.buildId);
  const warnings = log.filter((e) => e.level === "warn").map((e) => `[${e.step ?? "-"}] ${e.message}`);
  return { templateId: info.templateId, warnings, ...buildPhases(log, t0, t1, stepCount) };
}

interface PlainRun {
  create: number;
  apt: number;
  pip: number;
  write: number;
  total: number;
}

/** The same work in a plain `base` sandbox with the SDK: create, the two commands as root, makeDir + files.write of the folder. */
async function plainRun(s: TemplateServer, files: { path: string; data: string }[]): Promise<PlainRun> {
  const t0 = Date.now();
  const sbx = await Sandbox.create("base", { ...s.conn, timeoutMs: 600_000 });
  try {
    const t1 = Date.now();
    await sbx.commands.run(APT_CMD, { user: "root", timeoutMs: 600_000 });
    const t2 = Date.now();
    await sbx.commands.run(PIP_CMD, { user: "root", timeoutMs: 600_000 });
    const t3 = Date.now();
    // The folders first: envd answers a multi-file write into new folders 403 now and then (a part's permission
    // check can run between another part's mkdir, as root, and its chown to the user).
    await sbx.files.makeDir(`${FOLDER}/lib`);
    await sbx.files.write(files.map((f) => ({ path: `${FOLDER}/${f.path}`, data: f.data })));
    const t4 = Date.now();
    const check = await sbx.commands.run(`tree --version && python3 -c 'import six' && ls -R ${FOLDER} | grep -c '^file-'`);
    if (check.stdout.trim().split("\n").pop() !== String(FILES)) throw new Error(`the plain sandbox's folder has ${check.stdout}`);
    return { create: (t1 - t0) / 1000, apt: (t2 - t1) / 1000, pip: (t3 - t2) / 1000, write: (t4 - t3) / 1000, total: (t4 - t0) / 1000 };
  } finally {
    await sbx.kill();
  }
}

const baseHash = () => findTemplateImage("base", benchImagesDir())?.hash ?? "none";

const med = (xs: number[]) => median(xs.filter((x) => !Number.isNaN(x)));
const secs = (v: number) => (Number.isNaN(v) ? "-" : `${v.toFixed(1)} s`);
const secsP90 = (xs: number[]) => (xs.length > 1 ? `${secs(med(xs))} (p90 ${secs(quantile(xs, 0.9))})` : secs(med(xs)));

export async function benchBuild(): Promise<GoalResult[]> {
  const rounds = envInt("LOCALE2B_BENCH_TEMPLATE_BUILDS", 1);
  heading(`templates 1: a template build (fromTemplate base, apt ${APT_PACKAGE}, pip ${PIP_PACKAGE}, copy of ${FILES} files) vs the same in a plain sandbox (process runtime; ${rounds} round(s))`);
  const why = missing("process", ["base"], { builds: true });
  if (why) {
    console.log(`skipped: ${why}`);
    return [];
  }
  console.log(`image: ${imageNote("base")}`);
  const s = await startTemplateServer("process", 0);
  const ctx = mkdtempSync(join(tmpdir(), "locale2b-bench-tpl-"));
  const plain: PlainRun[] = [];
  const cold: BuildPhases[] = [];
  const cached: BuildPhases[] = [];
  try {
    let retries = 2;
    for (let r = 0; r < rounds; r++) {
      const marker = `bench-${randomBytes(6).toString("hex")}`;
      rmSync(join(ctx, "app"), { recursive: true, force: true });
      const files = makeFolder(ctx, marker);
      // The marker comes first (an ENV step: no files, no time), so every later step's cache key is new.
      const template = Template({ fileContextPath: ctx })
        .fromTemplate("base")
        .setEnvs({ LOCALE2B_BENCH_MARKER: marker })
        .aptInstall([APT_PACKAGE])
        .pipInstall([PIP_PACKAGE])
        .copy("app/", FOLDER);
      const name = `bench-build-${marker}`;
      const baseBefore = baseHash();
      const pl = await plainRun(s, files);
      const c = await timedBuild(s, template, name, 4);
      if (c.cachedSteps !== 0) throw new Error(`the cold build found ${c.cachedSteps} step(s) cached`);
      for (const w of c.warnings) console.log(`  cold build's log: ${w}`);
      const w = await timedBuild(s, template, name, 4);
      await s.deleteTemplate(c.templateId);
      if (w.cachedSteps !== 4) {
        // Every step's cache key starts from the base image's content hash: a `base` rebuilt into the
        // shared image cache meanwhile (another server or CLI) makes the rebuild's keys new.
        const changed = baseHash() !== baseBefore;
        const why = changed
          ? `base was rebuilt into ${benchImagesDir()} during the round (${baseBefore} -> ${baseHash()}), so the rebuild's cache keys were new`
          : `the unchanged rebuild ran ${4 - w.cachedSteps} step(s) again${c.warnings.length ? ` (the cold build's log: ${c.warnings.join("; ")})` : ""}`;
        if (!changed || retries-- === 0) throw new Error(why);
        console.log(`  round ${r + 1} again: ${why}`);
        r--;
        continue;
      }
      plain.push(pl);
      cold.push(c);
      cached.push(w);
    }
  } finally {
    rmSync(ctx, { recursive: true, force: true });
    await s.stop();
  }
  const p = med(plain.map((x) => x.total));
  const c = med(cold.map((x) => x.total));
  const w = med(cached.map((x) => x.total));
  printTable(
    ["seconds (median)", "plain sandbox", "cold build", "cached build"],
    [
      ["total (SDK call to return)", secsP90(plain.map((x) => x.total)), secsP90(cold.map((x) => x.total)), secsP90(cached.map((x) => x.total))],
      ["ratio to the plain sandbox", "1.00x", fmtRatio(c / p), fmtRatio(w / p)],
      ["SDK: template, upload, start (until queued)", "-", secs(med(cold.map((x) => x.sdk))), secs(med(cached.map((x) => x.sdk)))],
      ["sandbox start (create / from template base)", secs(med(plain.map((x) => x.create))), secs(med(cold.map((x) => x.sandbox))), secs(med(cached.map((x) => x.sandbox)))],
      ["ENV (the run's marker)", "-", secs(med(cold.map((x) => x.steps[0]!))), "CACHED"],
      [`apt-get update + install ${APT_PACKAGE}`, secs(med(plain.map((x) => x.apt))), secs(med(cold.map((x) => x.steps[1]!))), "CACHED"],
      [`pip install ${PIP_PACKAGE}`, secs(med(plain.map((x) => x.pip))), secs(med(cold.map((x) => x.steps[2]!))), "CACHED"],
      [`copy (makeDir + files.write) of ${FILES} files`, secs(med(plain.map((x) => x.write))), secs(med(cold.map((x) => x.steps[3]!))), "CACHED"],
      ["export the root into a new image", "-", secs(med(cold.map((x) => x.export))), secs(med(cached.map((x) => x.export)))],
      ["start check (no start command here)", "-", secs(med(cold.map((x) => x.startCheck))), secs(med(cached.map((x) => x.startCheck)))],
      ["image ready -> Template.build returned", "-", secs(med(cold.map((x) => x.finish))), secs(med(cached.map((x) => x.finish)))],
    ],
  );
  console.log("A step's time runs from its first log line to the next step's (a COPY's includes sending the tar into the sandbox);");
  console.log("each step that ran also takes a filesystem snapshot for the cache, counted in it.");
  return [
    { benchmark: "templates", metric: "cold build / plain sandbox", value: fmtRatio(c / p), goal: "-", ok: true },
    { benchmark: "templates", metric: "cached build / plain sandbox", value: fmtRatio(w / p), goal: "-", ok: true },
  ];
}
