import type { Runtime } from "./runtime.js";

/**
 * The runtimes one server runs sandboxes on: its default (--runtime) and,
 * started the first time a template asks for it, any other a template's
 * definition names (`runtime: qemu`). A runtime that cannot run on this host
 * fails that template's creates with its own reason, not the server's start.
 */
export class RuntimeSet {
  private readonly loaded = new Map<string, Promise<Runtime>>();

  constructor(
    readonly fallback: Runtime,
    private readonly o: {
      /** Makes a runtime by name and checks it can run here (throws with what to install). */
      create?: (name: string) => Promise<Runtime>;
      /** The runtime a template asks for, if any. */
      templateRuntime?: (templateId: string) => string | undefined;
    } = {},
  ) {
    this.loaded.set(fallback.name, Promise.resolve(fallback));
  }

  /** The runtime new sandboxes of this template run on. */
  forTemplate(templateId: string): Promise<Runtime> {
    const wanted = this.o.templateRuntime?.(templateId);
    return wanted ? this.byName(wanted) : Promise.resolve(this.fallback);
  }

  /** A runtime by name (for sandboxes re-adopted after a restart, and templates' choices). */
  byName(name: string): Promise<Runtime> {
    let rt = this.loaded.get(name);
    if (!rt) {
      const create = this.o.create;
      if (!create) return Promise.reject(new Error(`this server runs only the '${this.fallback.name}' runtime, not '${name}'`));
      rt = (async () => {
        const runtime = await create(name);
        await runtime.check();
        return runtime;
      })();
      // A failed start is retried next time (the host may have been set up meanwhile).
      rt.catch(() => this.loaded.delete(name));
      this.loaded.set(name, rt);
    }
    return rt;
  }

  /** The server stops: every started runtime finishes its background work (Runtime.close). */
  async close(): Promise<void> {
    const started = await Promise.all([...this.loaded.values()].map((p) => p.catch(() => undefined)));
    await Promise.all(started.map((rt) => rt?.close?.()));
  }
}
