// Which accelerator a VM runtime can use on this host: KVM, or TCG (software
// emulation) with the reason. Reads and probes only.
import { constants, existsSync } from "node:fs";
import { open, readFile } from "node:fs/promises";

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
