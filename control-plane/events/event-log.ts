import type { ActivityDb } from "../store/activity-db.js";
import type { EventFilter } from "./filter.js";
import type { SandboxEvent } from "./types.js";

/**
 * Every event, kept for `retentionMs` so that a subscriber that was
 * disconnected (it fell behind, or restarted) resumes from the last id it
 * saw, and so that a harness can fetch a sandbox's history.
 */
export class EventLog {
  constructor(
    private readonly db: ActivityDb,
    readonly retentionMs: number,
  ) {}

  /** The highest id ever written (ids continue from it after a restart). */
  lastId(): number {
    return Number(this.db.get<{ id: number | null }>("SELECT MAX(id) AS id FROM events")?.id ?? 0);
  }

  append(e: SandboxEvent): void {
    this.db.write("INSERT INTO events (id, time, type, sandbox_id, body) VALUES (?, ?, ?, ?, ?)", [
      e.id,
      Date.parse(e.timestamp),
      e.event_type,
      e.sandbox_id,
      JSON.stringify(e),
    ]);
  }

  /** Up to `limit` events with an id above `afterId` (and at or after `sinceMs`), oldest first. */
  page(afterId: number, filter: EventFilter, limit: number, sinceMs?: number): SandboxEvent[] {
    this.db.flush();
    const where = ["id > ?"];
    const params: (string | number)[] = [afterId];
    if (sinceMs !== undefined) {
      where.push("time >= ?");
      params.push(sinceMs);
    }
    if (filter.sandboxIds) {
      where.push(`sandbox_id IN (${[...filter.sandboxIds].map(() => "?").join(", ")})`);
      params.push(...filter.sandboxIds);
    }
    if (filter.types) {
      where.push(`type IN (${[...filter.types].map(() => "?").join(", ")})`);
      params.push(...filter.types);
    }
    const rows = this.db.all<{ body: string }>(`SELECT body FROM events WHERE ${where.join(" AND ")} ORDER BY id LIMIT ${Math.max(1, Math.floor(limit))}`, params);
    return rows.map((r) => JSON.parse(r.body) as SandboxEvent);
  }

  /** The oldest id still kept (0 when empty). */
  oldestId(): number {
    return Number(this.db.get<{ id: number | null }>("SELECT MIN(id) AS id FROM events")?.id ?? 0);
  }

  prune(now = Date.now()): number {
    return this.db.run("DELETE FROM events WHERE time < ?", [now - this.retentionMs]);
  }
}
