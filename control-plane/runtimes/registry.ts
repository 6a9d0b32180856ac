// Every runtime this build knows, as each describes itself from its own folder.
// The first is the default (zero-config).
import type { RuntimeContext, RuntimeDescriptor } from "./descriptor.js";
import { firecrackerRuntime } from "./firecracker/descriptor.js";
import { gvisorRuntime } from "./gvisor/descriptor.js";
import { processRuntime } from "./process/descriptor.js";
import { qemuRuntime } from "./qemu/descriptor.js";
import type { Runtime } from "./runtime.js";

export const RUNTIMES: readonly RuntimeDescriptor[] = [processRuntime, gvisorRuntime, qemuRuntime, firecrackerRuntime];

/** The runtime `doctor` judges the host by unless told otherwise: the one with the most to install. */
export const DOCTOR_RUNTIME = qemuRuntime.name;

/** The zero-config runtime `serve` uses unless told otherwise. */
export const DEFAULT_RUNTIME = RUNTIMES[0]!.name;

export function runtimeNames(): string[] {
  return RUNTIMES.map((r) => r.name);
}

/** The descriptor of a runtime by name, or undefined. */
export function findRuntime(name: string): RuntimeDescriptor | undefined {
  return RUNTIMES.find((r) => r.name === name);
}

/** The descriptor of a runtime by name; throws naming the known ones. */
export function runtimeNamed(name: string): RuntimeDescriptor {
  const d = findRuntime(name);
  if (!d) throw new Error(`unknown runtime '${name}' (known: ${runtimeNames().join(", ")})`);
  return d;
}

/** Makes a runtime by name (whether the host can run it is found out by its check()). */
export function createRuntime(name: string, ctx: RuntimeContext = {}): Promise<Runtime> {
  return runtimeNamed(name).create(ctx);
}
