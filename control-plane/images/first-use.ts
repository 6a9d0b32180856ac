// The first `npm start` on a fresh machine: the process runtime runs every
// sandbox on the `base` template, so `serve` makes sure it is built (a few
// minutes once, then a cache hit in well under a second), installing what
// the build needs on a Debian-like host when it can, with a progress line, or
// failing with an error that names what is missing.
import { spawnSync } from "node:child_process";
import { findExecutable } from "../host/executables.js";

/** Debian packages the build (and the process runtime's networking) needs, by the tool that shows each is there. */
const NEEDED: [tool: string, pkg: string][] = [
  ["debootstrap", "debootstrap"],
  ["gcc", "gcc"],
  ["mkfs.ext4", "e2fsprogs"],
  // envd's Node in every image is patched to load its own libraries (guest-runtime.ts).
  ["patchelf", "patchelf"],
  ["nft", "nftables"],
];

/** Installs what is missing with apt-get (as root, where there is one); returns what is still missing. */
export function installBuildTools(say: (line: string) => void): string[] {
  const missing = NEEDED.filter(([tool]) => !findExecutable(tool));
  // Static linking needs libc's headers and archives too (libc6-dev), which no tool shows.
  const pkgs = [...new Set([...missing.map(([, pkg]) => pkg), ...(missing.some(([t]) => t === "gcc") ? ["libc6-dev"] : [])])];
  if (!pkgs.length) return [];
  const apt = spawnSync("apt-get", ["--version"], { stdio: "ignore" }).status === 0;
  if (process.getuid?.() !== 0 || !apt) return pkgs;
  say(`installing ${pkgs.join(", ")} (apt-get) for the sandbox image and sandbox networks…`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const install = () => spawnSync("apt-get", ["install", "-y", "-q", "--no-install-recommends", ...pkgs], { stdio: ["ignore", "ignore", "inherit"], env });
  if (install().status !== 0) {
    spawnSync("apt-get", ["update", "-q"], { stdio: ["ignore", "ignore", "inherit"], env });
    install();
  }
  return NEEDED.filter(([tool]) => !findExecutable(tool)).map(([, pkg]) => pkg);
}

/**
 * Builds (or finds cached) the built-in template `name` (rootfs/templates),
 * printing progress on `out`. Throws with what to install when it cannot.
 */
export async function ensureBuiltInTemplate(name: string, imagesDir: string, out: NodeJS.WritableStream = process.stderr, purpose = "sandbox image"): Promise<void> {
  const say = (line: string) => out.write(`locale2b: ${line}\n`);
  const { buildTemplate } = await import("./template-build.js");
  const { findTemplateImage } = await import("./layout.js");
  const had = findTemplateImage(name, imagesDir) !== undefined;
  const stillMissing = installBuildTools(say).filter((p) => p !== "nftables");
  if (stillMissing.length) {
    if (had) return; // an older build still runs sandboxes; the next start can update it
    throw new Error(`the ${name} ${purpose} cannot be built here: install ${stillMissing.join(", ")} (apt-get install ${stillMissing.join(" ")}), or build it elsewhere into ${imagesDir}`);
  }
  let announced = false;
  const r = await buildTemplate(name, {
    imagesDir,
    progress: (e) => {
      // Steps 1-3 (envd bundle, init, npm packages) run, cached or not, even when the image is up to date: stay quiet for them.
      if (e.state === "cached" || (e.state === "start" && e.index < 4)) return;
      if (!announced) say(`preparing the ${name} ${purpose} in ${imagesDir} (first use: a few minutes; cached afterwards)`);
      announced = true;
      if (e.state === "start") say(`  ${name} [${e.index}/${e.total}] ${e.title}…`);
      else if (e.state === "done") say(`  ${name} [${e.index}/${e.total}] ${e.title}: ${e.note ?? "done"} (${Math.round(e.seconds ?? 0)} s)`);
    },
  });
  if (!r.cached) say(`${name} ${purpose} ${r.id} ready in ${Math.round(r.seconds)} s`);
}

/** The `base` template, which every sandbox of the process and gvisor runtimes runs on unless asked otherwise. */
export function ensureBaseTemplate(imagesDir: string, out: NodeJS.WritableStream = process.stderr): Promise<void> {
  return ensureBuiltInTemplate("base", imagesDir, out, "sandbox image");
}

/** Built-in templates `serve` builds in the background once it listens, so they are there by the time they are asked for. */
export const BACKGROUND_TEMPLATES = ["code-interpreter-v1"];

/** Built-in templates being built in the background now: name -> when it started. */
export const buildingInBackground = new Map<string, number>();

/** Builds `name` in the background (one at a time), saying so on `out`; failures are reported, not thrown. */
export function buildInBackground(name: string, imagesDir: string, out: NodeJS.WritableStream = process.stderr): Promise<void> {
  buildingInBackground.set(name, Date.now());
  return ensureBuiltInTemplate(name, imagesDir, out, "template")
    .catch((err: Error) => void out.write(`locale2b: building the ${name} template failed: ${err.message} (sandboxes of it cannot start; 'locale2b template build ${name}' says more)\n`))
    .finally(() => buildingInBackground.delete(name));
}
