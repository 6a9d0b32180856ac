import type { AuditEntry, AuditQuery } from "../audit/audit-log.js";
import type { SandboxEvent } from "../events/types.js";
import type { MetricSample } from "../metrics/history.js";
import type { ActivityDb } from "./activity-db.js";
import type { ActivityHistory, EventPageQuery, HistoryKind } from "./activity-history.js";

const TABLES: Record<HistoryKind, string> = { events: "events", audit: "audit", samples: "metric_samples" };

/**
 * Activity history in one box's activity.db (ActivityDb: writes queued and
 * committed together every 200 ms). Ids are the caller's (one process numbers
 * its own): addEvent and addAudit resolve with the id they were given.
 */
export class SqliteActivityHistory implements ActivityHistory {
  readonly numbers = false;

  constructor(private readonly db: ActivityDb) {}

  addEvent(e: SandboxEvent): Promise<number> {
    this.db.write("INSERT INTO events (id, time, type, sandbox_id, body) VALUES (?, ?, ?, ?, ?)", [e.id, Date.parse(e.timestamp), e.event_type, e.sandbox_id, JSON.stringify(e)]);
    return Promise.resolve(e.id);
  }

  async events(q: EventPageQuery): Promise<SandboxEvent[]> {
    this.db.flush();
    const where = ["id > ?"];
    const params: (string | number)[] = [q.afterId];
    if (q.sinceMs !== undefined) {
      where.push("time >= ?");
      params.push(q.sinceMs);
    }
    if (q.filter.sandboxIds) {
      where.push(`sandbox_id IN (${[...q.filter.sandboxIds].map(() => "?").join(", ")})`);
      params.push(...q.filter.sandboxIds);
    }
    if (q.filter.types) {
      where.push(`type IN (${[...q.filter.types].map(() => "?").join(", ")})`);
      params.push(...q.filter.types);
    }
    const rows = this.db.all<{ body: string }>(`SELECT body FROM events WHERE ${where.join(" AND ")} ORDER BY id LIMIT ${Math.max(1, Math.floor(q.limit))}`, params);
    return rows.map((r) => JSON.parse(r.body) as SandboxEvent);
  }

  async eventIds(): Promise<{ oldest: number; newest: number }> {
    this.db.flush();
    const row = this.db.get<{ oldest: number | null; newest: number | null }>("SELECT MIN(id) AS oldest, MAX(id) AS newest FROM events");
    return { oldest: Number(row?.oldest ?? 0), newest: Number(row?.newest ?? 0) };
  }

  addAudit(e: AuditEntry): Promise<number> {
    this.db.write("INSERT INTO audit (id, time, actor, api, action, sandbox_id, result, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
      e.id,
      Date.parse(e.time),
      e.actor,
      e.api,
      e.action,
      e.sandbox_id ?? null,
      e.result,
      JSON.stringify(e),
    ]);
    return Promise.resolve(e.id);
  }

  async audit(q: AuditQuery): Promise<AuditEntry[]> {
    this.db.flush();
    const where = ["id > ?"];
    const params: (string | number)[] = [q.afterId ?? 0];
    if (q.beforeId) {
      where.push("id < ?");
      params.push(q.beforeId);
    }
    if (q.sinceMs !== undefined) {
      where.push("time >= ?");
      params.push(q.sinceMs);
    }
    if (q.untilMs !== undefined) {
      where.push("time < ?");
      params.push(q.untilMs);
    }
    if (q.sandboxId) {
      where.push("sandbox_id = ?");
      params.push(q.sandboxId);
    }
    if (q.actor) {
      where.push("actor = ?");
      params.push(q.actor);
    }
    if (q.action) {
      where.push("instr(action, ?) > 0");
      params.push(q.action);
    }
    return this.db
      .all<{ body: string }>(`SELECT body FROM audit WHERE ${where.join(" AND ")} ORDER BY id${q.newestFirst ? " DESC" : ""} LIMIT ${Math.max(1, Math.floor(q.limit))}`, params)
      .map((r) => JSON.parse(r.body) as AuditEntry);
  }

  async lastAuditId(): Promise<number> {
    this.db.flush();
    return Number(this.db.get<{ id: number | null }>("SELECT MAX(id) AS id FROM audit")?.id ?? 0);
  }

  addSample(sandboxId: string, s: MetricSample): void {
    this.db.write("INSERT OR REPLACE INTO metric_samples (sandbox_id, time, body) VALUES (?, ?, ?)", [sandboxId, s.time, JSON.stringify(s)]);
  }

  async samples(sandboxId: string, fromMs: number, toMs: number, limit = 10_000): Promise<MetricSample[]> {
    this.db.flush();
    return this.db
      .all<{ body: string }>(`SELECT body FROM metric_samples WHERE sandbox_id = ? AND time >= ? AND time <= ? ORDER BY time LIMIT ${Math.max(1, Math.floor(limit))}`, [sandboxId, fromMs, toMs])
      .map((r) => JSON.parse(r.body) as MetricSample);
  }

  async latestSamples(sandboxIds: string[]): Promise<Map<string, MetricSample>> {
    this.db.flush();
    const out = new Map<string, MetricSample>();
    for (const id of sandboxIds) {
      const row = this.db.get<{ body: string }>("SELECT body FROM metric_samples WHERE sandbox_id = ? ORDER BY time DESC LIMIT 1", [id]);
      if (row) out.set(id, JSON.parse(row.body) as MetricSample);
    }
    return out;
  }

  async prune(kind: HistoryKind, beforeMs: number): Promise<number> {
    return this.db.run(`DELETE FROM ${TABLES[kind]} WHERE time < ?`, [beforeMs]);
  }

  async flush(): Promise<void> {
    this.db.flush();
  }

  /** The ActivityDb is the caller's (sessions and cursors live in it too): closing it is theirs. */
  async close(): Promise<void> {
    this.db.flush();
  }
}
