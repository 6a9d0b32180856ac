// A fleet's shared activity history (events, audit entries, metric samples in
// Postgres) is pruned by its API replicas, with the retention they are given
// (--event-retention-hours, --audit-retention-days, --metrics-retention-hours,
// or their LOCALE2B_* variables): one setting for the fleet, whatever each
// node's says. Nodes write the history and do not prune it. Each replica
// prunes at start and every hour; an advisory lock lets one prune at a time.
import type { Logger } from "pino";
import type { PgActivityHistory } from "../store/pg-activity-history.js";
import { Periodic } from "./periodic.js";

export interface HistoryRetention {
  eventRetentionMs: number;
  auditRetentionMs: number;
  metricsRetentionMs: number;
}

export class HistoryPruner {
  private readonly every: Periodic;

  constructor(
    private readonly o: { history: PgActivityHistory; retention: HistoryRetention; log: Logger; everyMs?: number },
  ) {
    this.every = new Periodic(() => this.prune(), o.everyMs ?? 3_600_000);
  }

  private async prune(): Promise<void> {
    const { retention: r, log } = this.o;
    const now = Date.now();
    try {
      const removed = await this.o.history.pruneAll({ events: now - r.eventRetentionMs, audit: now - r.auditRetentionMs, samples: now - r.metricsRetentionMs });
      if (removed) log.info({ removed, retention: r }, "pruned the fleet's activity history");
      else log.debug("another replica is pruning the fleet's activity history");
    } catch (err) {
      log.warn({ err }, "pruning the fleet's activity history failed: the next hour tries again");
    }
  }

  start(): Promise<void> {
    return this.every.start();
  }

  stop(): Promise<void> {
    return this.every.stop();
  }
}
