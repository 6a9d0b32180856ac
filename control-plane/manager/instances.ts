import type { Instance } from "../runtimes/runtime.js";
import { ControlPlaneError } from "../domain/errors.js";

/** The live instance of each sandbox this server runs, and the runtime it came from. */
export class InstanceTable {
  private readonly byId = new Map<string, { inst: Instance; runtime: string }>();

  set(id: string, inst: Instance, runtime: string): void {
    this.byId.set(id, { inst, runtime });
  }

  get(id: string): Instance | undefined {
    return this.byId.get(id)?.inst;
  }

  /** The instance of a sandbox that must have one (`unavailable` otherwise). */
  require(id: string): Instance {
    const inst = this.get(id);
    if (!inst) throw new ControlPlaneError("unavailable", `sandbox '${id}' has no running instance`);
    return inst;
  }

  /** Forgets a sandbox's instance and returns it. */
  take(id: string): Instance | undefined {
    const inst = this.get(id);
    this.byId.delete(id);
    return inst;
  }

  all(): Instance[] {
    return [...this.byId.values()].map((e) => e.inst);
  }

  ids(): string[] {
    return [...this.byId.keys()];
  }

  /** Host memory per live sandbox, where its runtime can tell (metrics). */
  hostMemory(): { sandboxId: string; runtime: string; bytes: number }[] {
    const out: { sandboxId: string; runtime: string; bytes: number }[] = [];
    for (const [sandboxId, { inst, runtime }] of this.byId) {
      if (inst.hostMemoryBytes) out.push({ sandboxId, runtime, bytes: inst.hostMemoryBytes() });
    }
    return out;
  }
}
