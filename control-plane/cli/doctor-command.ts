// `locale2b doctor`: what this host has for the microVM runtimes, as a table
// (or JSON); exit 1 when something the qemu runtime needs is missing.
import { hostChecks, qemuReady, type HostCheck } from "../host/checks.js";
import { imagesDir } from "../images/layout.js";
import { parse } from "./args.js";

const HELP = `Usage: locale2b doctor [--json]

Checks what the microVM runtimes need on this host: QEMU (microvm machine),
qemu-img, vhost-device-vsock, the accelerator (KVM, or TCG where /dev/kvm
cannot run a guest), the image tools (debootstrap, mkfs.ext4, gcc with a
static libc), Firecracker (optional), runsc for the gvisor runtime (optional:
its version and platform), and whether the guest kernel and the
'base' template are built. scripts/setup-host installs the tools.

Exit status: 0 when the qemu runtime has everything it needs (a kernel and
a template can still be missing), 1 otherwise.

Options:
  --json      print the checks as JSON
  -h, --help  show this help

Environment: LOCALE2B_IMAGES_DIR, LOCALE2B_DATA_DIR, LOCALE2B_KERNEL,
LOCALE2B_QEMU, LOCALE2B_QEMU_IMG, LOCALE2B_VHOST_VSOCK, LOCALE2B_FIRECRACKER,
LOCALE2B_RUNSC, LOCALE2B_RUNSC_PLATFORM.
`;

/** ok, or how much a failed check matters. */
export function statusOf(c: HostCheck): string {
  if (c.ok) return "ok";
  switch (c.required) {
    case "qemu":
      return "MISSING";
    case "images":
      return "todo";
    default:
      return "n/a";
  }
}

/** The checks as an aligned table: status, check, detail, fix. */
export function formatChecks(checks: HostCheck[]): string {
  const rows = [["STATUS", "CHECK", "DETAIL", "FIX"], ...checks.map((c) => [statusOf(c), c.name, c.detail, c.fix && !c.ok ? c.fix : ""])];
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => (i < 3 ? cell.padEnd(widths[i]!) : cell)).join("  ").trimEnd()).join("\n") + "\n";
}

function summary(checks: HostCheck[]): string {
  const missing = checks.filter((c) => !c.ok && c.required === "qemu").map((c) => c.name);
  const todo = checks.filter((c) => !c.ok && c.required === "images").map((c) => c.name);
  const tcg = checks.find((c) => c.name === "acceleration")?.detail.startsWith("TCG");
  const accel = tcg ? "under TCG: software emulation, guests boot in seconds" : "under KVM";
  const lines = [`images: ${imagesDir()}`];
  if (missing.length) lines.push(`qemu runtime: not ready, missing ${missing.join(", ")}`);
  else if (todo.length) lines.push(`qemu runtime: tools ready, VMs run ${accel}; to boot sandboxes still build: ${todo.join(", ")}`);
  else lines.push(`qemu runtime: ready, VMs run ${accel}`);
  const runsc = checks.find((c) => c.name === "runsc");
  if (runsc) lines.push(runsc.ok ? `gvisor runtime: ${runsc.detail}` : "gvisor runtime: runsc is not installed (scripts/setup-host installs it)");
  return lines.join("\n") + "\n";
}

export async function runDoctorCommand(args: string[]): Promise<number> {
  const { values } = parse("doctor", {
    args,
    options: { json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const checks = await hostChecks();
  const ok = qemuReady(checks);
  if (values.json) process.stdout.write(JSON.stringify({ ok, imagesDir: imagesDir(), checks }, null, 2) + "\n");
  else process.stdout.write(formatChecks(checks) + "\n" + summary(checks));
  return ok ? 0 : 1;
}
