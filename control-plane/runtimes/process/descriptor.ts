import type { RuntimeDescriptor } from "../descriptor.js";

export const processRuntime: RuntimeDescriptor = {
  name: "process",
  help: "host processes in namespaces: a container-grade sandbox, zero-config",
  banner: "sandboxes are host processes, not microVMs (no VM isolation, no memory snapshots)",
  warmPoolDefault: 2,
  bootsDisk: false,
  baseImageAtStart: true,
  snapshotsHint: "the process runtime takes filesystem snapshots when it runs as root (its sandbox mode)",
  async create() {
    const { ProcessRuntime } = await import("./process-runtime.js");
    return new ProcessRuntime();
  },
  checks: () => [],
  doctorHelp: "",
  doctorSettings: [],
  summary: () => "process runtime: needs nothing more (as root: the base template, built by `npm start`)",
};
