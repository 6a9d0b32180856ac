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
 * Builds (or finds cached) the `base` template for the process runtime,
 * printing progress on stderr. Throws with what to install when it cannot.
 */
export async function ensureBaseTemplate(imagesDir: string, out: NodeJS.WritableStream = process.stderr): Promise<void> {
  const say = (line: string) => out.write(`locale2b: ${line}\n`);
  const { buildTemplate } = await import("./template-build.js");
  const { findTemplateImage } = await import("./layout.js");
  const had = findTemplateImage("base", imagesDir) !== undefined;
  const stillMissing = installBuildTools(say).filter((p) => p !== "nftables");
  if (stillMissing.length) {
    if (had) return; // an older build still runs sandboxes; the next start can update it
    throw new Error(`the base sandbox image cannot be built here: install ${stillMissing.join(", ")} (apt-get install ${stillMissing.join(" ")}), or build it elsewhere into ${imagesDir}`);
  }
  let announced = false;
  const r = await buildTemplate("base", {
    imagesDir,
    progress: (e) => {
      // Steps 1-3 (envd bundle, init, npm packages) run, cached or not, even when the image is up to date: stay quiet for them.
      if (e.state === "cached" || (e.state === "start" && e.index < 4)) return;
      if (!announced) say(`preparing the base sandbox image in ${imagesDir} (first start: a few minutes; cached afterwards)`);
      announced = true;
      if (e.state === "start") say(`  [${e.index}/${e.total}] ${e.title}…`);
      else if (e.state === "done") say(`  [${e.index}/${e.total}] ${e.title}: ${e.note ?? "done"} (${Math.round(e.seconds ?? 0)} s)`);
    },
  });
  if (!r.cached) say(`base sandbox image ${r.id} ready in ${Math.round(r.seconds)} s`);
}
