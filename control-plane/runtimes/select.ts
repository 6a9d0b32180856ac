import type { Runtime } from "./runtime.js";
import { ProcessRuntime } from "./process/process-runtime.js";
import { QemuRuntime } from "./qemu/qemu-runtime.js";

export const RUNTIME_NAMES = ["process", "gvisor", "qemu", "firecracker"] as const;
export type RuntimeName = (typeof RUNTIME_NAMES)[number];

export function isRuntimeName(name: string): name is RuntimeName {
  return (RUNTIME_NAMES as readonly string[]).includes(name);
}

export interface RuntimeChoice {
  /** Where kernels and templates live (default imagesDir()). */
  imagesDir?: string;
}

/**
 * The runtime by name: `process` (zero-config, host processes in
 * namespaces), `gvisor` (runsc sandboxes), `qemu` (QEMU microvm, KVM or TCG) or `firecracker`. Whether
 * the host can run it is found out by its check(), at start-up.
 */
export async function createRuntime(name: RuntimeName, o: RuntimeChoice = {}): Promise<Runtime> {
  switch (name) {
    case "process":
      return new ProcessRuntime();
    case "gvisor": {
      const { GvisorRuntime } = await import("./gvisor/gvisor-runtime.js");
      return new GvisorRuntime({ imagesDir: o.imagesDir });
    }
    case "qemu":
      return new QemuRuntime({ imagesDir: o.imagesDir });
    case "firecracker": {
      const { FirecrackerRuntime } = await import("./firecracker/firecracker-runtime.js");
      return new FirecrackerRuntime({ imagesDir: o.imagesDir });
    }
  }
}
