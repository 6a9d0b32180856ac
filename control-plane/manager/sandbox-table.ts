// The live sandboxes of this host, in memory, written through to the store.
import type { Logger } from "pino";
import { byStart, LIVE_STATES, matchesFilter, type ListFilter, type SandboxRecord } from "../domain/sandbox.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { Store } from "../store/store.js";

/** Ended sandboxes whose records stay in memory. */
const ENDED_KEPT = 256;

/**
 * The records of the sandboxes this manager runs (every state but killed),
 * held in memory: the manager is their only writer, so reads (every proxied
 * request asks) need no store round trip, which for Postgres is a network
 * hop. Writes change the memory at once and go to the store in order, one
 * after another; an operation is acknowledged only after `flushed()`.
 * A killed sandbox leaves memory; its record stays in the store (a
 * retention period, pruneDeadRecords).
 */
export class SandboxTable {
  private readonly live = new Map<string, SandboxRecord>();
  /** The last sandboxes to end, newest last: their records as they ended, for events about them (ENDED_KEPT). */
  private readonly ended = new Map<string, SandboxRecord>();
  private tail: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    /** This host's name in a fleet: its records carry it and only they are loaded. */
    private readonly node?: string,
  ) {}

  /** Reads this host's live records from the store (a start). */
  async load(): Promise<SandboxRecord[]> {
    const recs = await this.store.listSandboxes({ states: [...LIVE_STATES], ...(this.node !== undefined ? { node: this.node } : {}) });
    for (const rec of recs) this.live.set(rec.id, rec);
    return recs;
  }

  get(id: string): SandboxRecord | undefined {
    return this.live.get(id);
  }

  /** A live record, or that of a sandbox that ended lately (its last state, before the store has it). */
  recent(id: string): SandboxRecord | undefined {
    return this.live.get(id) ?? this.ended.get(id);
  }

  /** As the store's listSandboxes (its filter, its order), of live records only. */
  list(filter: ListFilter = {}): SandboxRecord[] {
    return [...this.live.values()].filter((r) => matchesFilter(r, filter)).sort(byStart);
  }

  get size(): number {
    return this.live.size;
  }

  /** Records `rec` now (a killed one leaves memory) and queues its write. */
  put(rec: SandboxRecord): SandboxRecord {
    const stored = this.node !== undefined ? { ...rec, node: this.node } : rec;
    if (stored.state === "killed") {
      this.live.delete(stored.id);
      this.ended.delete(stored.id);
      this.ended.set(stored.id, stored);
      if (this.ended.size > ENDED_KEPT) this.ended.delete(this.ended.keys().next().value!);
    } else {
      this.live.set(stored.id, stored);
    }
    this.enqueue(() => this.store.putSandbox(stored), stored.id);
    return stored;
  }

  delete(id: string): void {
    this.live.delete(id);
    this.enqueue(() => this.store.deleteSandbox(id), id);
  }

  private enqueue(write: () => Promise<void>, sandboxId: string): void {
    const run = this.tail.catch(() => undefined).then(write);
    run.catch((err: unknown) => this.log.error({ err, sandboxId }, "writing a sandbox record to the store failed"));
    this.tail = run;
  }

  /** Resolves once every write queued so far is committed; rejects when the last one failed. */
  async flushed(): Promise<void> {
    try {
      await this.tail;
    } catch (err) {
      throw new ControlPlaneError("internal", `the sandbox store could not be written: ${(err as Error).message}`);
    }
  }
}
