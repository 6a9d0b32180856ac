import type { ActivityDb } from "../store/activity-db.js";
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
 * database (it survives restarts). Every string that goes in passes the
 * redactor first.
 */
export class AuditLog {
  private lastId: number;

  constructor(
    private readonly db: ActivityDb,
    private readonly redactor: Redactor,
    readonly retentionMs: number,
  ) {
    this.lastId = Number(db.get<{ id: number | null }>("SELECT MAX(id) AS id FROM audit")?.id ?? 0);
  }

  record(e: NewAuditEntry): AuditEntry {
    const { time, ...rest } = e;
    const entry: AuditEntry = { id: ++this.lastId, time: new Date(time ?? Date.now()).toISOString(), ...rest };
    if (entry.message) entry.message = this.redactor.redact(entry.message, entry.sandbox_id);
    if (entry.details) entry.details = this.scrub(entry.details, entry.sandbox_id) as Record<string, unknown>;
    this.db.write("INSERT INTO audit (id, time, actor, api, action, sandbox_id, result, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
      entry.id,
      Date.parse(entry.time),
      entry.actor,
      entry.api,
      entry.action,
      entry.sandbox_id ?? null,
      entry.result,
      JSON.stringify(entry),
    ]);
    return entry;
  }

  private scrub(v: unknown, sandboxId: string | undefined): unknown {
    if (typeof v === "string") return this.redactor.redact(v, sandboxId);
    if (Array.isArray(v)) return v.map((x) => this.scrub(x, sandboxId));
    if (v && typeof v === "object") {
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, this.scrub(x, sandboxId)]));
    }
    return v;
  }

  /** A page of entries, oldest first. */
  query(q: AuditQuery): AuditEntry[] {
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

  prune(now = Date.now()): number {
    return this.db.run("DELETE FROM audit WHERE time < ?", [now - this.retentionMs]);
  }
}
