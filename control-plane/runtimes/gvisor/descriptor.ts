import type { RuntimeDescriptor } from "../descriptor.js";
import { gvisorChecks, gvisorSummary } from "./checks.js";

export const gvisorRuntime: RuntimeDescriptor = {
  name: "gvisor",
  help: "runsc sandboxes: a user-space kernel; needs root and runsc",
  banner: "sandboxes are gVisor (runsc) sandboxes: a user-space kernel between their code and the host's (pause writes them to disk and frees their memory: runsc checkpoint)",
  warmPoolDefault: 0,
  bootsDisk: false,
  baseImageAtStart: true,
  snapshotsHint: "gVisor sandboxes take memory and filesystem snapshots",
  async create(ctx) {
    const { GvisorRuntime } = await import("./gvisor-runtime.js");
    return new GvisorRuntime({ imagesDir: ctx.imagesDir });
  },
  checks: (env) => gvisorChecks(env),
  summary: gvisorSummary,
  doctorHelp: "runsc (its version and platform)",
  doctorSettings: ["LOCALE2B_RUNSC", "LOCALE2B_RUNSC_PLATFORM"],
};
