import type { AuditEntry, AuditQuery } from "../audit/audit-log.js";
import type { EventFilter } from "../events/filter.js";
import type { SandboxEvent } from "../events/types.js";
import type { MetricSample } from "../metrics/history.js";

/** A page of the event log: ids above `afterId` (and at or after `sinceMs`), oldest first. */
export interface EventPageQuery {
  afterId: number;
  filter: EventFilter;
  limit: number;
  sinceMs?: number;
}

/** Which history a prune trims. */
export type HistoryKind = "events" | "audit" | "samples";

/**
 * Where activity history is kept: the event log, the audit log and metric
 * samples. One box keeps it in its data dir's SQLite (activity.db); a server
 * whose sandbox store is Postgres (fleet nodes, API replicas, `serve
 * --database-url`) keeps it in that Postgres, so that any replica reads the
 * whole fleet's and a lost node's stays readable.
 *
 * Writes are queued and written together (every ~200 ms), never one round
 * trip per row; their promises resolve once the row is written. Reads see
 * what is written: each flushes this process's queue first.
 */
export interface ActivityHistory {
  /**
   * Whether the history numbers events and audit entries itself (Postgres:
   * ids from one sequence, in the order they were written, whichever host
   * wrote them). Otherwise the caller numbers them (SQLite: one process).
   */
  readonly numbers: boolean;
  /** Queues an event; resolves with its id once written (rejects if it could not be). */
  addEvent(e: SandboxEvent): Promise<number>;
  events(q: EventPageQuery): Promise<SandboxEvent[]>;
  /** The oldest and newest ids kept (0 when empty). */
  eventIds(): Promise<{ oldest: number; newest: number }>;
  addAudit(e: AuditEntry): Promise<number>;
  audit(q: AuditQuery): Promise<AuditEntry[]>;
  /** The highest audit id ever written (0 when empty). */
  lastAuditId(): Promise<number>;
  /** Queues a sample; a later one of the same sandbox and time replaces it. */
  addSample(sandboxId: string, s: MetricSample): void;
  /** Samples of a sandbox from `fromMs` to `toMs` (inclusive), oldest first. */
  samples(sandboxId: string, fromMs: number, toMs: number, limit?: number): Promise<MetricSample[]>;
  /** The newest sample of each of these sandboxes that has one. */
  latestSamples(sandboxIds: string[]): Promise<Map<string, MetricSample>>;
  /** Deletes what is older than `beforeMs`; how many rows went. */
  prune(kind: HistoryKind, beforeMs: number): Promise<number>;
  /** Writes what is queued now. */
  flush(): Promise<void>;
  close(): Promise<void>;
}
