import type { ActivityHistory } from "../store/activity-history.js";
import type { EventFilter } from "./filter.js";
import type { SandboxEvent } from "./types.js";

/**
 * Every event, kept for `retentionMs` so that a subscriber that was
 * disconnected (it fell behind, or restarted) resumes from the last id it
 * saw, and so that a harness can fetch a sandbox's history. Kept in the
 * activity history: one box's SQLite, or the fleet's Postgres (where ids are
 * fleet-wide and the history numbers them: `numbers`).
 */
export class EventLog {
  constructor(
    readonly history: ActivityHistory,
    readonly retentionMs: number,
  ) {}

  /** Whether the history gives events their ids (Postgres) rather than the bus (SQLite). */
  get numbers(): boolean {
    return this.history.numbers;
  }

  /** The highest id ever written (ids continue from it after a restart). */
  async lastId(): Promise<number> {
    return (await this.history.eventIds()).newest;
  }

  /** Queues the event; resolves with its id once written. */
  append(e: SandboxEvent): Promise<number> {
    return this.history.addEvent(e);
  }

  /** Up to `limit` events with an id above `afterId` (and at or after `sinceMs`), oldest first. */
  page(afterId: number, filter: EventFilter, limit: number, sinceMs?: number): Promise<SandboxEvent[]> {
    return this.history.events({ afterId, filter, limit, ...(sinceMs !== undefined ? { sinceMs } : {}) });
  }

  /** The oldest id still kept (0 when empty). */
  async oldestId(): Promise<number> {
    return (await this.history.eventIds()).oldest;
  }

  prune(now = Date.now()): Promise<number> {
    return this.history.prune("events", now - this.retentionMs);
  }
}
