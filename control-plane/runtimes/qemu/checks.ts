// What the qemu runtime needs on a host (`locale2b doctor`): QEMU with the
// microvm machine, qemu-img, vhost-device-vsock, and the accelerator.
import { execFile } from "node:child_process";
import type { Accel } from "../../host/accel.js";
import { apt, binaryCheck, sudo, type HostCheck } from "../../host/checks.js";
import { findExecutable } from "../../host/executables.js";
import { setting } from "../../settings.js";

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

export function qemuChecks(env: NodeJS.ProcessEnv, accel: Promise<Accel>): Promise<HostCheck>[] {
  return [
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
  ];
}

/** doctor's line for the qemu runtime. */
export function qemuSummary(checks: HostCheck[]): string {
  const missing = checks.filter((c) => !c.ok && c.required === "qemu").map((c) => c.name);
  const todo = checks.filter((c) => !c.ok && c.required === "images").map((c) => c.name);
  const tcg = checks.find((c) => c.name === "acceleration")?.detail.startsWith("TCG");
  const accel = tcg ? "under TCG: software emulation, guests boot in seconds" : "under KVM";
  if (missing.length) return `qemu runtime: not ready, missing ${missing.join(", ")}`;
  if (todo.length) return `qemu runtime: tools ready, VMs run ${accel}; to boot sandboxes still build: ${todo.join(", ")}`;
  return `qemu runtime: ready, VMs run ${accel}`;
}
