// What this host has for the microVM runtimes: the checks behind
// `locale2b doctor` and scripts/setup-host, and the accelerator choice the
// qemu runtime uses. Reads and probes only; installs nothing, prints nothing.
import { execFile } from "node:child_process";
import { constants, existsSync, statSync } from "node:fs";
import { open, readFile } from "node:fs/promises";
import { join } from "node:path";
import { findKernel, findTemplateImage, imagesDir } from "../images/layout.js";
import { findExecutable } from "./executables.js";
import { RUNSC_INSTALL, runscVersion } from "../runtimes/gvisor/runsc.js";
import { setting } from "../settings.js";

export interface HostCheck {
  name: string;
  ok: boolean;
  /** What needs it: the qemu runtime, the firecracker runtime, booting any VM (images), or nothing. */
  required: "qemu" | "firecracker" | "images" | "optional";
  detail: string;
  /** What to run or change when it is not ok. */
  fix?: string;
}

export interface Accel {
  accel: "kvm" | "tcg";
  reason: string;
}

/** Where the host facts are read from (tests point these at fixtures). */
export interface HostProbe {
  kvm?: string;
  cpuinfo?: string;
  /** A directory that exists when the kvm_pvm module is loaded. */
  pvmModule?: string;
  modules?: string;
}

const DEFAULT_PROBE: Required<HostProbe> = {
  kvm: "/dev/kvm",
  cpuinfo: "/proc/cpuinfo",
  pvmModule: "/sys/module/kvm_pvm",
  modules: "/proc/modules",
};

/**
 * KVM only when /dev/kvm opens read-write, the CPU shows vmx or svm, and the
 * KVM is not PVM (pagetable-based virtualization: its /dev/kvm opens and
 * creates VMs, but a normal guest kernel crawls and then fails under it).
 * Otherwise TCG, with the reason.
 */
export async function accelFor(probe: HostProbe = {}): Promise<Accel> {
  const p = { ...DEFAULT_PROBE, ...probe };
  // What the hardware can do first: on a PVM host being allowed to open /dev/kvm would not help.
  if (!existsSync(p.kvm)) return { accel: "tcg", reason: `no ${p.kvm} (KVM module not loaded, or no virtualization on this host)` };
  if (await pvmLoaded(p)) {
    return { accel: "tcg", reason: `${p.kvm} is PVM (kvm_pvm module loaded): it cannot run a normal guest kernel` };
  }
  const flags = await cpuFlags(p.cpuinfo);
  if (flags === undefined) return { accel: "tcg", reason: `cannot read CPU flags from ${p.cpuinfo}` };
  const hw = flags.has("vmx") ? "vmx" : flags.has("svm") ? "svm" : undefined;
  if (!hw) {
    return { accel: "tcg", reason: `the CPU shows no vmx/svm (no hardware virtualization exposed to this host, e.g. a PVM or nested guest): ${p.kvm} cannot run a normal guest kernel` };
  }
  const kvm = await openable(p.kvm);
  if (kvm !== "ok") return { accel: "tcg", reason: kvm };
  return { accel: "kvm", reason: `${p.kvm} is usable and the CPU has ${hw}` };
}

async function openable(path: string): Promise<"ok" | string> {
  try {
    const fh = await open(path, constants.O_RDWR);
    await fh.close();
    return "ok";
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return `no ${path} (KVM module not loaded, or no virtualization on this host)`;
    if (code === "EACCES" || code === "EPERM") return `${path} is not readable and writable by this user (add the user to the kvm group)`;
    return `${path} cannot be opened (${code ?? (err as Error).message})`;
  }
}

async function pvmLoaded(p: Required<HostProbe>): Promise<boolean> {
  if (existsSync(p.pvmModule)) return true;
  try {
    return /^kvm_pvm\s/m.test(await readFile(p.modules, "utf8"));
  } catch {
    return false;
  }
}

async function cpuFlags(cpuinfo: string): Promise<Set<string> | undefined> {
  try {
    const m = /^flags\s*:(.*)$/m.exec(await readFile(cpuinfo, "utf8"));
    return new Set((m?.[1] ?? "").trim().split(/\s+/));
  } catch {
    return undefined;
  }
}


/** The first line of a command's output, or the failure. */
function firstLine(file: string, args: string[]): Promise<{ ok: boolean; text: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 10_000, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      const out = `${stdout}`.trim() || `${stderr}`.trim();
      if (err) resolve({ ok: false, text: (out.split("\n")[0] || err.message).slice(0, 200) });
      else resolve({ ok: true, text: out.split("\n")[0] ?? "" });
    });
  });
}

const sudo = () => (process.getuid?.() === 0 ? "" : "sudo ");
const apt = (pkgs: string) => `${sudo()}scripts/setup-host, or: ${sudo()}apt-get install -y ${pkgs}`;

/** A binary check: found and `<bin> <versionArgs>` runs. */
async function binaryCheck(
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

async function qemuCheck(env: NodeJS.ProcessEnv): Promise<HostCheck> {
  const check = await binaryCheck("qemu-system-x86_64", setting("LOCALE2B_QEMU", env), "LOCALE2B_QEMU", "qemu", ["--version"], apt("qemu-system-x86"), (l) =>
    l.replace(/^QEMU emulator version /, "QEMU ").replace(/\s*\(Debian [^)]*\)/, ""),
  );
  if (!check.ok) return check;
  const path = findExecutable("qemu-system-x86_64", setting("LOCALE2B_QEMU", env))!;
  const machines = await new Promise<string>((resolve) =>
    execFile(path, ["-machine", "help"], { timeout: 10_000 }, (_err, stdout) => resolve(`${stdout}`)),
  );
  if (!/^microvm\s/m.test(machines)) {
    return { ...check, ok: false, detail: `${check.detail} has no 'microvm' machine type`, fix: "install a QEMU built with the microvm machine (Debian's qemu-system-x86 has it)" };
  }
  return { ...check, detail: `${check.detail}, microvm` };
}

async function accelCheck(accel: Promise<Accel>): Promise<HostCheck> {
  const a = await accel;
  const check: HostCheck = {
    name: "acceleration",
    ok: true, // TCG works, only slower
    required: "qemu",
    detail: `${a.accel.toUpperCase()}: ${a.reason}`,
  };
  if (a.accel === "tcg" && a.reason.includes("kvm group")) check.fix = `${sudo()}usermod -aG kvm $USER, then log in again`;
  return check;
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

async function firecrackerCheck(env: NodeJS.ProcessEnv, accel: Promise<Accel>): Promise<HostCheck> {
  const fix = "optional (firecracker runtime only, needs hardware KVM): put a firecracker binary on PATH or set LOCALE2B_FIRECRACKER";
  const check = await binaryCheck("firecracker", setting("LOCALE2B_FIRECRACKER", env), "LOCALE2B_FIRECRACKER", "firecracker", ["--version"], fix);
  if (!check.ok) return check;
  const a = await accel;
  if (a.accel !== "kvm") return { ...check, ok: false, detail: `${check.detail}, but it needs hardware KVM: ${a.reason}`, fix: "run the firecracker runtime on a host with vmx/svm" };
  return check;
}

/** runsc for the gvisor runtime: its version and the platform its sandboxes run on (systrap, ptrace, kvm). */
async function runscCheck(env: NodeJS.ProcessEnv): Promise<HostCheck> {
  const check = await binaryCheck("runsc", setting("LOCALE2B_RUNSC", env), "LOCALE2B_RUNSC", "optional", ["--version"], `optional (gvisor runtime only): ${RUNSC_INSTALL}`, (l) =>
    l.replace(/^runsc version /, "runsc "),
  );
  if (!check.ok) return check;
  const path = findExecutable("runsc", setting("LOCALE2B_RUNSC", env), env)!;
  const v = await runscVersion(path).catch(() => undefined);
  return { ...check, detail: v ? `${check.detail}, platform ${v.platform}` : check.detail };
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

/** Every check, run concurrently, in a fixed order. */
export async function hostChecks(env: NodeJS.ProcessEnv = process.env): Promise<HostCheck[]> {
  const dir = imagesDir(env);
  const accel = accelFor();
  return Promise.all([
    qemuCheck(env),
    binaryCheck("qemu-img", setting("LOCALE2B_QEMU_IMG", env), "LOCALE2B_QEMU_IMG", "qemu", ["--version"], apt("qemu-utils"), (l) =>
      l.replace(/^qemu-img version /, "qemu-img ").replace(/\s*\(Debian [^)]*\)/, ""),
    ),
    binaryCheck(
      "vhost-device-vsock",
      setting("LOCALE2B_VHOST_VSOCK", env),
      "LOCALE2B_VHOST_VSOCK",
      "qemu",
      ["--version"],
      `scripts/setup-host (puts Debian sid's build in ${process.getuid?.() === 0 ? "/usr/local/bin" : "~/.local/bin"}; apt sources unchanged), or set LOCALE2B_VHOST_VSOCK`,
    ),
    accelCheck(accel),
    binaryCheck("debootstrap", undefined, "", "images", ["--version"], apt("debootstrap")),
    binaryCheck("mkfs.ext4", undefined, "", "images", ["-V"], apt("e2fsprogs")),
    gccCheck(),
    firecrackerCheck(env, accel),
    runscCheck(env),
    Promise.resolve(kernelCheck(env, dir)),
    Promise.resolve(templateCheck(dir)),
    // network.allowOut/denyOut on the process runtime (as root): nftables on the host side of each sandbox's veth.
    binaryCheck("nft", undefined, "", "optional", ["--version"], apt("nftables")),
  ]);
}

/** True when nothing the qemu runtime itself needs is missing. */
export function qemuReady(checks: HostCheck[]): boolean {
  return checks.every((c) => c.ok || c.required !== "qemu");
}
