import { EventEmitter } from "node:events";
import type { LifecycleEvent, SandboxRecord } from "../domain/sandbox.js";

export interface EventFilter {
  sandboxId?: string;
  metadata?: Record<string, string>;
}

export function matches(filter: EventFilter, sandbox: SandboxRecord): boolean {
  if (filter.sandboxId && filter.sandboxId !== sandbox.id) return false;
  for (const [k, v] of Object.entries(filter.metadata ?? {})) if (sandbox.metadata[k] !== v) return false;
  return true;
}

/** Lifecycle events (created, paused, resumed, killed, timed_out) for the Connect stream and metrics. */
export class LifecycleBus {
  private readonly emitter = new EventEmitter();

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  emit(event: LifecycleEvent): void {
    this.emitter.emit("event", event);
  }

  /** Calls `listener` for matching events until the returned function is called. */
  subscribe(filter: EventFilter, listener: (e: LifecycleEvent) => void): () => void {
    const l = (e: LifecycleEvent) => {
      if (matches(filter, e.sandbox)) listener(e);
    };
    this.emitter.on("event", l);
    return () => this.emitter.off("event", l);
  }
}
