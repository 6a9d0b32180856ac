// What a host has for the runtimes: the check type behind `locale2b doctor`,
// the helpers a runtime's own checks are made of (runtimes/<name>/checks.ts),
// and the checks every image-booting runtime shares (the image tools, the
// guest kernel, the base template, nftables). Reads and probes only;
// installs nothing, prints nothing.
import { execFile } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { findKernel, findTemplateImage } from "../images/layout.js";
import { findExecutable } from "./executables.js";
import { setting } from "../settings.js";

export interface HostCheck {
  name: string;
  ok: boolean;
  /**
   * What needs it: a runtime (by name) that cannot run without it, booting
   * any image (`images`: the guest kernel, the base template, the tools that
   * build them), or nothing (`optional`).
   */
  required: string;
  detail: string;
  /** What to run or change when it is not ok. */
  fix?: string;
}

/** The first line of a command's output, or the failure. */
export function firstLine(file: string, args: string[]): Promise<{ ok: boolean; text: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 10_000, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      const out = `${stdout}`.trim() || `${stderr}`.trim();
      if (err) resolve({ ok: false, text: (out.split("\n")[0] || err.message).slice(0, 200) });
      else resolve({ ok: true, text: out.split("\n")[0] ?? "" });
    });
  });
}

export const sudo = (): string => (process.getuid?.() === 0 ? "" : "sudo ");
/** The fix for a Debian package that is missing. */
export const apt = (pkgs: string): string => `${sudo()}scripts/setup-host, or: ${sudo()}apt-get install -y ${pkgs}`;

/** A binary check: found and `<bin> <versionArgs>` runs. */
export async function binaryCheck(
  name: string,
  override: string | undefined,
  overrideVar: string,
  required: HostCheck["required"],
  versionArgs: string[],
  fix: string,
  version: (line: string) => string = (l) => l,
): Promise<HostCheck> {
  const path = findExecutable(name, override);
  if (!path) {
    const where = override ? `${overrideVar}=${override} is not an executable file` : `not found on PATH, /usr/local/bin, ~/.local/bin or sbin`;
    return { name, ok: false, required, detail: where, fix };
  }
  const v = await firstLine(path, versionArgs);
  if (!v.ok) return { name, ok: false, required, detail: `${path} does not run: ${v.text}`, fix };
  return { name, ok: true, required, detail: `${version(v.text)} (${path})` };
}

function libcStatic(): boolean {
  return ["/usr/lib/x86_64-linux-gnu/libc.a", "/usr/lib64/libc.a", "/usr/lib/libc.a"].some((p) => existsSync(p));
}

async function gccCheck(): Promise<HostCheck> {
  const fix = apt("gcc libc6-dev");
  const check = await binaryCheck("gcc", undefined, "", "images", ["--version"], fix, (l) => l.replace(/^gcc \(.*?\) /, "gcc "));
  if (check.ok && !libcStatic()) return { ...check, ok: false, detail: `${check.detail}, but no static libc (libc.a) for the guest init`, fix };
  return check;
}

function kernelCheck(env: NodeJS.ProcessEnv, dir: string): HostCheck {
  const kernel = findKernel(env, dir);
  if (kernel) return { name: "guest kernel", ok: true, required: "images", detail: `${kernel} (${(statSync(kernel).size / 2 ** 20).toFixed(0)} MiB)` };
  return {
    name: "guest kernel",
    ok: false,
    required: "images",
    detail: setting("LOCALE2B_KERNEL", env) ? `LOCALE2B_KERNEL=${setting("LOCALE2B_KERNEL", env)} does not exist` : `not built in ${join(dir, "kernels")}`,
    fix: "scripts/build-kernel.sh (about 25 min on 2 cores, once)",
  };
}

function templateCheck(dir: string): HostCheck {
  const image = findTemplateImage("base", dir);
  if (image) return { name: "template base", ok: true, required: "images", detail: `${image.dir} (built ${image.manifest.builtAt})` };
  return { name: "template base", ok: false, required: "images", detail: `not built in ${join(dir, "templates")}`, fix: `${sudo()}locale2b template build base` };
}

/** The image tools (debootstrap, mkfs.ext4, gcc with a static libc). */
export function imageToolChecks(): Promise<HostCheck>[] {
  return [
    binaryCheck("debootstrap", undefined, "", "images", ["--version"], apt("debootstrap")),
    binaryCheck("mkfs.ext4", undefined, "", "images", ["-V"], apt("e2fsprogs")),
    gccCheck(),
  ];
}

/** The guest kernel and the base template in the image cache `dir`, and nftables (network.allowOut/denyOut). */
export function imageChecks(env: NodeJS.ProcessEnv, dir: string): Promise<HostCheck>[] {
  return [
    Promise.resolve(kernelCheck(env, dir)),
    Promise.resolve(templateCheck(dir)),
    // network.allowOut/denyOut: nftables on the host side of each sandbox's network device.
    binaryCheck("nft", undefined, "", "optional", ["--version"], apt("nftables")),
  ];
}

/** True when nothing the runtime `name` itself needs is missing. */
export function runtimeReady(checks: HostCheck[], name: string): boolean {
  return checks.every((c) => c.ok || c.required !== name);
}
