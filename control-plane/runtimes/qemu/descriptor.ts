import type { RuntimeDescriptor } from "../descriptor.js";
import { qemuChecks, qemuSummary } from "./checks.js";

export const qemuRuntime: RuntimeDescriptor = {
  name: "qemu",
  help: "QEMU microVMs; KVM or emulation",
  banner: "sandboxes are QEMU microVMs (pause keeps them in memory)",
  warmPoolDefault: 0,
  bootsDisk: true,
  baseImageAtStart: false,
  snapshotsHint: "QEMU microVMs take filesystem snapshots",
  async create(ctx) {
    const { QemuRuntime } = await import("./qemu-runtime.js");
    return new QemuRuntime({ imagesDir: ctx.imagesDir });
  },
  checks: qemuChecks,
  summary: qemuSummary,
  doctorHelp: "QEMU (microvm machine), qemu-img, vhost-device-vsock, the accelerator (KVM, or TCG where /dev/kvm cannot run a guest)",
  doctorSettings: ["LOCALE2B_QEMU", "LOCALE2B_QEMU_IMG", "LOCALE2B_VHOST_VSOCK"],
};
