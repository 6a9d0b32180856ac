import type { RuntimeDescriptor } from "../descriptor.js";
import { firecrackerChecks, firecrackerSummary } from "./checks.js";

export const firecrackerRuntime: RuntimeDescriptor = {
  name: "firecracker",
  help: "Firecracker microVMs; needs hardware KVM",
  banner: "sandboxes are Firecracker microVMs (pause snapshots them to disk)",
  warmPoolDefault: 0,
  bootsDisk: true,
  baseImageAtStart: false,
  snapshotsHint: "Firecracker microVMs take memory and filesystem snapshots",
  async create(ctx) {
    const { FirecrackerRuntime } = await import("./firecracker-runtime.js");
    return new FirecrackerRuntime({ imagesDir: ctx.imagesDir });
  },
  checks: firecrackerChecks,
  summary: firecrackerSummary,
  doctorHelp: "Firecracker and hardware KVM",
  doctorSettings: ["LOCALE2B_FIRECRACKER"],
};
