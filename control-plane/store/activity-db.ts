import { mkdirSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import sqlite from "node-sqlite3-wasm";
import type { Logger } from "pino";

export const ACTIVITY_DB_FILE = "activity.db";

/**
 * What the control plane records about activity, beside the sandbox store
 * (locale2b.db): the event log, the audit log, metric samples, workspace
 * background sessions, and where it left off reading each sandbox's envd
 * activity. A separate file, so that this append-heavy history never holds
 * a lock the sandbox store's writes would wait for.
 */
const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS events (
     id INTEGER PRIMARY KEY,
     time INTEGER NOT NULL,
     type TEXT NOT NULL,
     sandbox_id TEXT NOT NULL,
     body TEXT NOT NULL
   )`,
  `CREATE INDEX IF NOT EXISTS events_time ON events(time)`,
  `CREATE INDEX IF NOT EXISTS events_sandbox ON events(sandbox_id, id)`,
  `CREATE TABLE IF NOT EXISTS audit (
     id INTEGER PRIMARY KEY,
     time INTEGER NOT NULL,
     actor TEXT NOT NULL,
     api TEXT NOT NULL,
     action TEXT NOT NULL,
     sandbox_id TEXT,
     result TEXT NOT NULL,
     body TEXT NOT NULL
   )`,
  `CREATE INDEX IF NOT EXISTS audit_time ON audit(time)`,
  `CREATE TABLE IF NOT EXISTS metric_samples (
     sandbox_id TEXT NOT NULL,
     time INTEGER NOT NULL,
     body TEXT NOT NULL,
     PRIMARY KEY (sandbox_id, time)
   )`,
  `CREATE INDEX IF NOT EXISTS metric_samples_time ON metric_samples(time)`,
  `CREATE TABLE IF NOT EXISTS sessions (
     sandbox_id TEXT NOT NULL,
     session_id TEXT NOT NULL,
     body TEXT NOT NULL,
     PRIMARY KEY (sandbox_id, session_id)
   )`,
  `CREATE TABLE IF NOT EXISTS envd_cursors (
     sandbox_id TEXT PRIMARY KEY,
     stream_id TEXT NOT NULL,
     seq INTEGER NOT NULL
   )`,
];

type Param = string | number | null;
/** A queued write; `skip` once a later writeLatest of its key replaced it. */
type Write = { sql: string; params: Param[]; skip?: boolean };
type Database = InstanceType<typeof sqlite.Database>;
type Statement = ReturnType<Database["prepare"]>;

/** How often queued writes are committed (one transaction each time). */
const FLUSH_MS = 200;
/** Queued writes past which a flush happens at once. */
const FLUSH_ROWS = 2000;

/**
 * The activity database: one SQLite file (WebAssembly SQLite, synchronous),
 * with writes queued and committed together every FLUSH_MS, so that a busy
 * server pays one transaction per batch instead of one fsync per event.
 * Reads see only committed rows: callers that must read their own writes
 * call flush() first.
 */
export class ActivityDb {
  private readonly db: Database;
  private readonly statements = new Map<string, Statement>();
  private queue: Write[] = [];
  /** The queued keyed writes (writeLatest), by key. */
  private readonly latest = new Map<string, Write>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    readonly path: string,
    private readonly log: Logger,
  ) {
    mkdirSync(dirname(path), { recursive: true });
    // The data dir is ours (the sandbox store claimed it): a lock directory left by a crash is stale.
    rmSync(`${path}.lock`, { recursive: true, force: true });
    this.db = new sqlite.Database(path);
    this.db.exec("PRAGMA busy_timeout = 5000");
    this.db.exec("PRAGMA synchronous = NORMAL");
    for (const stmt of SCHEMA) this.db.exec(stmt);
  }

  private statement(sql: string): Statement {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.db.prepare(sql);
      this.statements.set(sql, st);
    }
    return st;
  }

  /** Queues a write; it is committed within FLUSH_MS (or by flush()). */
  write(sql: string, params: Param[]): void {
    if (this.closed) return;
    this.enqueue({ sql, params });
  }

  private enqueue(w: Write): void {
    this.queue.push(w);
    if (this.queue.length >= FLUSH_ROWS) this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => this.flush(), FLUSH_MS);
      this.timer.unref();
    }
  }

  /**
   * Queues a write that replaces a queued write of the same `key` (e.g. a
   * watch's cursor, upserted after every event): only the latest is run, at
   * its own place in the order of the queue.
   */
  writeLatest(key: string, sql: string, params: Param[]): void {
    if (this.closed) return;
    const before = this.latest.get(key);
    if (before) before.skip = true;
    const w: Write = { sql, params };
    this.latest.set(key, w);
    this.enqueue(w);
  }

  /** Commits every queued write now, in one transaction. */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.queue.length === 0 || !this.db.isOpen) return;
    const batch = this.queue;
    this.queue = [];
    this.latest.clear();
    try {
      this.db.exec("BEGIN");
      for (const w of batch) if (!w.skip) this.statement(w.sql).run(w.params);
      this.db.exec("COMMIT");
    } catch (err) {
      try {
        this.db.exec("ROLLBACK");
      } catch {
        // no transaction left to roll back
      }
      this.log.error({ err, rows: batch.length }, "writing activity history failed: these rows are lost");
    }
  }

  /** Runs a statement now (after committing what is queued, so the order holds). */
  run(sql: string, params: Param[] = []): number {
    this.flush();
    return this.statement(sql).run(params).changes;
  }

  /** Reads are not prepared once and kept (their SQL varies with filters): only the fixed writes are. */
  all<T = Record<string, unknown>>(sql: string, params: Param[] = []): T[] {
    return this.db.all(sql, params) as T[];
  }

  get<T = Record<string, unknown>>(sql: string, params: Param[] = []): T | undefined {
    return (this.db.get(sql, params) as T | null) ?? undefined;
  }

  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    for (const st of this.statements.values()) st.finalize();
    this.statements.clear();
    if (this.db.isOpen) this.db.close();
  }
}
