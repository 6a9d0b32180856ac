import pg from "pg";
import type { Logger } from "pino";
import type { AuditEntry, AuditQuery } from "../audit/audit-log.js";
import type { SandboxEvent } from "../events/types.js";
import type { MetricSample } from "../metrics/history.js";
import type { ActivityHistory, EventPageQuery, HistoryKind } from "./activity-history.js";
import { inTransaction } from "./pg-store.js";

const TABLES: Record<HistoryKind, string> = { events: "events", audit: "audit", samples: "metric_samples" };

/** How often queued writes are written (one transaction, one multi-row INSERT per table). */
const FLUSH_MS = 200;
/** Queued rows past which they are written at once. */
const FLUSH_ROWS = 2000;
/**
 * The advisory lock every writer of events and audit entries holds from
 * taking its ids until it commits: so ids become visible in the order they
 * were taken, and a reader paging by id (since_id, Last-Event-ID) never
 * skips a row that commits later with a lower id.
 */
const ACTIVITY_LOCK = 0x6c326261; // "l2ba"
/** Held by the one API replica pruning the shared history at a time (pruneAll). */
export const PRUNE_LOCK = 0x6c327072; // "l2pr"

interface Pending<T> {
  item: T;
  resolve: (id: number) => void;
  reject: (err: Error) => void;
}

/**
 * Activity history in the fleet's Postgres (tables of migration 6, applied
 * by PgStore.open). Every writer's rows are queued and written every
 * FLUSH_MS in one transaction: a busy node pays one round trip per batch, not
 * per event. Event and audit ids come from their bigserial sequences, taken
 * a batch at a time under ACTIVITY_LOCK, so they grow in the order rows were
 * written across every host.
 */
export class PgActivityHistory implements ActivityHistory {
  readonly numbers = true;
  private events_: Pending<SandboxEvent>[] = [];
  private audits: Pending<AuditEntry>[] = [];
  private readonly samplesQ = new Map<string, { sandboxId: string; s: MetricSample }>();
  private timer: NodeJS.Timeout | undefined;
  /** The batch being written: batches are written one after another, in order. */
  private writing: Promise<void> = Promise.resolve();
  private closed = false;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
  ) {}

  /** Connects to a database PgStore.open has migrated (a `postgres://` URL, or libpq's PG* variables when empty). */
  static open(url: string, log: Logger, opts: { max?: number } = {}): PgActivityHistory {
    const pool = new pg.Pool({ ...(url ? { connectionString: url } : {}), max: opts.max ?? 4, application_name: "locale2b-activity" });
    // An idle client's error (the server restarted) must not crash the process: the pool drops that client.
    pool.on("error", () => undefined);
    return new PgActivityHistory(pool, log);
  }

  private queued(): number {
    return this.events_.length + this.audits.length + this.samplesQ.size;
  }

  private schedule(): void {
    if (this.queued() >= FLUSH_ROWS) void this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => void this.flush(), FLUSH_MS);
      this.timer.unref();
    }
  }

  addEvent(e: SandboxEvent): Promise<number> {
    if (this.closed) return Promise.reject(new Error("the activity history is closed"));
    return new Promise((resolve, reject) => {
      this.events_.push({ item: e, resolve, reject });
      this.schedule();
    });
  }

  addAudit(e: AuditEntry): Promise<number> {
    if (this.closed) return Promise.reject(new Error("the activity history is closed"));
    return new Promise((resolve, reject) => {
      this.audits.push({ item: e, resolve, reject });
      this.schedule();
    });
  }

  addSample(sandboxId: string, s: MetricSample): void {
    if (this.closed) return;
    this.samplesQ.set(`${sandboxId}\0${s.time}`, { sandboxId, s });
    this.schedule();
  }

  /**
   * Writes what is queued now, and what writing it queues: a written event
   * is handed to in-process listeners, and the audit entry one of them
   * records is written too before this resolves (as one box's flush sees it).
   */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.writing = this.writing.then(async () => {
      // Events queue audit entries, never the reverse: a few rounds at most, however busy the host.
      for (let round = 0; round < 3 && this.queued() > 0; round++) {
        await this.writeBatch();
        await null;
      }
    });
    return this.writing;
  }

  /** Writes what is queued now; a failed batch is logged and its promises rejected (the rows are lost). */
  private async writeBatch(): Promise<void> {
    if (this.queued() === 0) return;
    const events = this.events_;
    const audits = this.audits;
    const samples = [...this.samplesQ.values()];
    this.events_ = [];
    this.audits = [];
    this.samplesQ.clear();
    let c: pg.PoolClient | undefined;
    try {
      c = await this.pool.connect();
      await c.query("BEGIN");
      if (events.length || audits.length) await c.query("SELECT pg_advisory_xact_lock($1)", [ACTIVITY_LOCK]);
      const eventIds = await this.insertEvents(c, events);
      const auditIds = await this.insertAudit(c, audits);
      if (samples.length) {
        await c.query(
          `INSERT INTO metric_samples (sandbox_id, time, body) SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])
           ON CONFLICT (sandbox_id, time) DO UPDATE SET body = EXCLUDED.body`,
          [samples.map((x) => x.sandboxId), samples.map((x) => x.s.time), samples.map((x) => JSON.stringify(x.s))],
        );
      }
      await c.query("COMMIT");
      events.forEach((p, i) => p.resolve(eventIds[i]!));
      audits.forEach((p, i) => p.resolve(auditIds[i]!));
    } catch (err) {
      await c?.query("ROLLBACK").catch(() => undefined);
      this.log.error({ err, events: events.length, audit: audits.length, samples: samples.length }, "writing activity history to Postgres failed: these rows are lost");
      for (const p of [...events, ...audits]) p.reject(err as Error);
    } finally {
      c?.release();
    }
  }

  /** `n` ids of a table's sequence, in order (the caller holds ACTIVITY_LOCK). */
  private async reserve(c: pg.PoolClient, table: string, n: number): Promise<number[]> {
    const seq = `${table}_id_seq`;
    const { rows } = await c.query<{ last: string }>(`SELECT setval('${seq}', nextval('${seq}') + $1 - 1) AS last`, [n]);
    const first = Number(rows[0]!.last) - n + 1;
    return Array.from({ length: n }, (_, i) => first + i);
  }

  private async insertEvents(c: pg.PoolClient, events: Pending<SandboxEvent>[]): Promise<number[]> {
    if (events.length === 0) return [];
    const ids = await this.reserve(c, "events", events.length);
    const rows = events.map((p, i) => ({ ...p.item, id: ids[i]! }));
    await c.query("INSERT INTO events (id, time, type, sandbox_id, body) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[])", [
      ids,
      rows.map((e) => Date.parse(e.timestamp)),
      rows.map((e) => e.event_type),
      rows.map((e) => e.sandbox_id),
      rows.map((e) => JSON.stringify(e)),
    ]);
    return ids;
  }

  private async insertAudit(c: pg.PoolClient, audits: Pending<AuditEntry>[]): Promise<number[]> {
    if (audits.length === 0) return [];
    const ids = await this.reserve(c, "audit", audits.length);
    const rows = audits.map((p, i) => ({ ...p.item, id: ids[i]! }));
    await c.query(
      "INSERT INTO audit (id, time, actor, api, action, sandbox_id, result, body) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])",
      [
        ids,
        rows.map((e) => Date.parse(e.time)),
        rows.map((e) => e.actor),
        rows.map((e) => e.api),
        rows.map((e) => e.action),
        rows.map((e) => e.sandbox_id ?? null),
        rows.map((e) => e.result),
        rows.map((e) => JSON.stringify(e)),
      ],
    );
    return ids;
  }

  private async bodies<T>(sql: string, params: unknown[]): Promise<T[]> {
    await this.flush();
    return (await this.pool.query<{ body: string }>(sql, params)).rows.map((r) => JSON.parse(r.body) as T);
  }

  events(q: EventPageQuery): Promise<SandboxEvent[]> {
    const params: unknown[] = [q.afterId];
    const where = ["id > $1"];
    if (q.sinceMs !== undefined) where.push(`time >= $${params.push(q.sinceMs)}`);
    if (q.filter.sandboxIds) where.push(`sandbox_id = ANY($${params.push([...q.filter.sandboxIds])}::text[])`);
    if (q.filter.types) where.push(`type = ANY($${params.push([...q.filter.types])}::text[])`);
    return this.bodies(`SELECT body FROM events WHERE ${where.join(" AND ")} ORDER BY id LIMIT ${Math.max(1, Math.floor(q.limit))}`, params);
  }

  async eventIds(): Promise<{ oldest: number; newest: number }> {
    await this.flush();
    const { rows } = await this.pool.query<{ oldest: string | null; newest: string | null }>("SELECT MIN(id) AS oldest, MAX(id) AS newest FROM events");
    return { oldest: Number(rows[0]?.oldest ?? 0), newest: Number(rows[0]?.newest ?? 0) };
  }

  audit(q: AuditQuery): Promise<AuditEntry[]> {
    const params: unknown[] = [q.afterId ?? 0];
    const where = ["id > $1"];
    if (q.beforeId) where.push(`id < $${params.push(q.beforeId)}`);
    if (q.sinceMs !== undefined) where.push(`time >= $${params.push(q.sinceMs)}`);
    if (q.untilMs !== undefined) where.push(`time < $${params.push(q.untilMs)}`);
    if (q.sandboxId) where.push(`sandbox_id = $${params.push(q.sandboxId)}`);
    if (q.actor) where.push(`actor = $${params.push(q.actor)}`);
    if (q.action) where.push(`strpos(action, $${params.push(q.action)}) > 0`);
    return this.bodies(`SELECT body FROM audit WHERE ${where.join(" AND ")} ORDER BY id${q.newestFirst ? " DESC" : ""} LIMIT ${Math.max(1, Math.floor(q.limit))}`, params);
  }

  async lastAuditId(): Promise<number> {
    await this.flush();
    const { rows } = await this.pool.query<{ id: string | null }>("SELECT MAX(id) AS id FROM audit");
    return Number(rows[0]?.id ?? 0);
  }

  samples(sandboxId: string, fromMs: number, toMs: number, limit = 10_000): Promise<MetricSample[]> {
    return this.bodies(`SELECT body FROM metric_samples WHERE sandbox_id = $1 AND time >= $2 AND time <= $3 ORDER BY time LIMIT ${Math.max(1, Math.floor(limit))}`, [sandboxId, fromMs, toMs]);
  }

  async latestSamples(sandboxIds: string[]): Promise<Map<string, MetricSample>> {
    await this.flush();
    const { rows } = await this.pool.query<{ sandbox_id: string; body: string }>(
      "SELECT DISTINCT ON (sandbox_id) sandbox_id, body FROM metric_samples WHERE sandbox_id = ANY($1::text[]) ORDER BY sandbox_id, time DESC",
      [sandboxIds],
    );
    return new Map(rows.map((r) => [r.sandbox_id, JSON.parse(r.body) as MetricSample]));
  }

  async prune(kind: HistoryKind, beforeMs: number): Promise<number> {
    return (await this.pool.query(`DELETE FROM ${TABLES[kind]} WHERE time < $1`, [beforeMs])).rowCount ?? 0;
  }

  /**
   * Prunes every kind older than its cutoff in one transaction, unless another
   * process is pruning now (a fleet's replicas prune one at a time): the rows
   * removed per kind, or undefined when skipped.
   */
  pruneAll(before: Record<HistoryKind, number>): Promise<Record<HistoryKind, number> | undefined> {
    return inTransaction(this.pool, async (c) => {
      const { rows } = await c.query<{ locked: boolean }>("SELECT pg_try_advisory_xact_lock($1) AS locked", [PRUNE_LOCK]);
      if (!rows[0]?.locked) return undefined;
      const removed = { events: 0, audit: 0, samples: 0 };
      for (const kind of Object.keys(removed) as HistoryKind[]) {
        removed[kind] = (await c.query(`DELETE FROM ${TABLES[kind]} WHERE time < $1`, [before[kind]])).rowCount ?? 0;
      }
      return removed;
    });
  }


  async close(): Promise<void> {
    if (this.closed) return;
    await this.flush();
    this.closed = true;
    await this.pool.end();
  }
}
