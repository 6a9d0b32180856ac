import type { ActivityHistory } from "../store/activity-history.js";
import type { Redactor } from "./redact.js";

/** Which surface an operation came through. */
export type AuditApi = "e2b" | "connect" | "workspace" | "envd" | "system" | "dashboard";

export interface AuditEntry {
  id: number;
  /** ISO 8601. */
  time: string;
  /**
   * Who: an API key's id (`key_…`, never the key), `envd-token` (whoever
   * holds the sandbox's access token: an E2B SDK through the proxy), or
   * `system` (timeouts, sandboxes that died).
   */
  actor: string;
  api: AuditApi;
  /** What: a route (`POST /sandboxes/:sandboxID/pause`), an RPC, or an event type (`exec.completed`). */
  action: string;
  sandbox_id?: string;
  result: "ok" | "error";
  /** The HTTP status, for requests. */
  status?: number;
  /** Why it failed. */
  message?: string;
  /** Safe facts about it (ids, a command, a path, an exit code): never a key, token or secret env value. */
  details?: Record<string, unknown>;
  duration_ms?: number;
}

export type NewAuditEntry = Omit<AuditEntry, "id" | "time"> & { time?: number };

export interface AuditQuery {
  sinceMs?: number;
  untilMs?: number;
  afterId?: number;
  /** Newest first: entries with an id below this one (0 or absent: from the newest). */
  beforeId?: number;
  newestFirst?: boolean;
  sandboxId?: string;
  actor?: string;
  /** Entries whose action contains this text (`pause`, `POST /sandboxes`, `exec.`). */
  action?: string;
  limit: number;
}

/**
 * The audit log: one row per operation, kept `retentionMs`, in the activity
 * history (one box's SQLite, or the fleet's Postgres; it survives restarts).
 * Every string that goes in passes the redactor first. Entries are written in
 * batches: a query (which flushes first) sees every entry recorded before it.
 */
export class AuditLog {
  private lastId: number;

  constructor(
    private readonly history: ActivityHistory,
    private readonly redactor: Redactor,
    readonly retentionMs: number,
    /** The highest id already kept (where this process numbers entries: SQLite). */
    startId = 0,
  ) {
    this.lastId = startId;
  }

  /** Records an entry (its id is the history's where the history numbers them: Postgres). */
  record(e: NewAuditEntry): void {
    const { time, ...rest } = e;
    const entry: AuditEntry = { id: this.history.numbers ? 0 : ++this.lastId, time: new Date(time ?? Date.now()).toISOString(), ...rest };
    if (entry.message) entry.message = this.redactor.redact(entry.message, entry.sandbox_id);
    if (entry.details) entry.details = this.scrub(entry.details, entry.sandbox_id) as Record<string, unknown>;
    // A failed write is logged by the history.
    this.history.addAudit(entry).catch(() => undefined);
  }

  private scrub(v: unknown, sandboxId: string | undefined): unknown {
    if (typeof v === "string") return this.redactor.redact(v, sandboxId);
    if (Array.isArray(v)) return v.map((x) => this.scrub(x, sandboxId));
    if (v && typeof v === "object") {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.scrub(x, sandboxId)]));
    }
    return v;
  }

  /** A page of entries, oldest first (newestFirst: newest first). */
  query(q: AuditQuery): Promise<AuditEntry[]> {
    return this.history.audit(q);
  }

  prune(now = Date.now()): Promise<number> {
    return this.history.prune("audit", now - this.retentionMs);
  }
}
