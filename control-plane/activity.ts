// Everything the control plane records about what happens: events
// (lifecycle + envd activity), the audit log and metrics history in the
// activity history (the data dir's activity.db, or the fleet's Postgres),
// background sessions and envd cursors in activity.db (this host's own), and
// the workspaces over them.
import { join } from "node:path";
import type { Logger } from "pino";
import { auditActivity } from "./audit/activity-audit.js";
import { AuditLog } from "./audit/audit-log.js";
import { AuditClaims } from "./audit/claims.js";
import { Redactor } from "./audit/redact.js";
import { EventBus, SUBSCRIBER_QUEUE_LIMIT } from "./events/bus.js";
import { NetworkWatch } from "./events/network-watch.js";
import { EnvdActivityWatchers } from "./events/envd-watchers.js";
import { EventFeed } from "./events/event-feed.js";
import { EventLog } from "./events/event-log.js";
import type { EventSource } from "./events/event-source.js";
import { lifecycleToEvent } from "./events/lifecycle.js";
import type { SandboxManager } from "./manager/sandbox-manager.js";
import { MetricsHistory } from "./metrics/history.js";
import { header, sample } from "./metrics/prometheus.js";
import { SessionManager } from "./sessions/session-manager.js";
import { ACTIVITY_DB_FILE, ActivityDb } from "./store/activity-db.js";
import type { ActivityHistory } from "./store/activity-history.js";
import { SqliteActivityHistory } from "./store/sqlite-activity-history.js";
import type { EnvdRpc } from "./transport/envd-rpc.js";
import { Workspaces } from "./workspace/workspaces.js";

export interface ActivitySettings {
  /** How long events are kept for replay (since_id / Last-Event-ID). */
  eventRetentionMs: number;
  /** How long audit entries are kept. */
  auditRetentionMs: number;
  /** Metrics history: sampling interval and how long samples are kept. */
  metricsIntervalMs: number;
  metricsRetentionMs: number;
  /** Output kept per background session, in bytes. */
  sessionBufferBytes: number;
  /** Running background sessions per sandbox. */
  sessionsPerSandbox: number;
  /** Unread events an event-stream subscriber may have before it is disconnected. */
  subscriberQueueLimit: number;
  /**
   * Watch each sandbox's envd for activity (exec.* and file.* events, and
   * their audit entries). Off: lifecycle events and API audit only.
   */
  watchSandboxes: boolean;
}

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

export const DEFAULT_ACTIVITY: ActivitySettings = {
  eventRetentionMs: DAY,
  auditRetentionMs: 30 * DAY,
  metricsIntervalMs: 5_000,
  metricsRetentionMs: DAY,
  sessionBufferBytes: 8 * 1024 * 1024,
  sessionsPerSandbox: 32,
  subscriberQueueLimit: SUBSCRIBER_QUEUE_LIMIT,
  watchSandboxes: true,
};

export interface Activity {
  /** This host's own: sessions and envd cursors. */
  db: ActivityDb;
  /** Events, audit entries and metric samples: activity.db's, or the fleet's Postgres. */
  activityHistory: ActivityHistory;
  redactor: Redactor;
  bus: EventBus;
  /** What event streams read: the bus (SQLite), or every host's events from Postgres (EventFeed). */
  events: EventSource;
  watchers: EnvdActivityWatchers;
  audit: AuditLog;
  claims: AuditClaims;
  sessions: SessionManager;
  history: MetricsHistory;
  workspaces: Workspaces;
  /** Prometheus series of events, subscribers and sessions. */
  renderPrometheus(): string;
  /** Closes the control plane's own streams to a sandbox about to be paused (SandboxManager's quiesce). */
  quiesce(sandboxId: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * Starts recording. `history`: where events, audit entries and metric
 * samples go when not to activity.db (the fleet's Postgres); closed with the rest.
 * `prune: false` leaves pruning that history to someone else (a fleet node: its
 * API replicas prune the shared history with the fleet's retention).
 */
export async function startActivity(o: { manager: SandboxManager; rpc: EnvdRpc; dataDir: string; settings: ActivitySettings; log: Logger; history?: ActivityHistory; prune?: boolean }): Promise<Activity> {
  const { manager, rpc, settings } = o;
  const log = o.log.child({ component: "activity" });
  const db = new ActivityDb(join(o.dataDir, ACTIVITY_DB_FILE), log);
  const store = o.history ?? new SqliteActivityHistory(db);
  const redactor = new Redactor();
  const eventLog = new EventLog(store, settings.eventRetentionMs);
  const bus = new EventBus(eventLog, settings.subscriberQueueLimit, store.numbers ? 0 : await eventLog.lastId());
  const feed = store.numbers ? new EventFeed(eventLog, log, undefined, settings.subscriberQueueLimit) : undefined;
  for (const rec of manager.list()) redactor.remember(rec);
  const offLifecycle = manager.events.subscribe({}, (e) => {
    if (e.type === "created" || e.type === "resumed") redactor.remember(e.sandbox);
    const event = lifecycleToEvent(e);
    if (event) bus.publish(event);
    if (e.type === "killed") redactor.forget(e.sandbox.id);
  });
  const audit = new AuditLog(store, redactor, settings.auditRetentionMs, store.numbers ? 0 : await store.lastAuditId());
  const claims = new AuditClaims();
  const watchers = new EnvdActivityWatchers({
    manager,
    rpc,
    db,
    bus,
    redactor,
    onPathChanged: (sandboxId, c) =>
      audit.record({
        actor: "envd-token",
        api: "envd",
        action: `file.${c.op}`,
        sandbox_id: sandboxId,
        result: "ok",
        details: {
          path: redactor.redact(c.path, sandboxId),
          ...(c.destination !== undefined ? { destination: redactor.redact(c.destination, sandboxId) } : {}),
          user: c.user,
        },
      }),
    log,
  });
  const sessions = new SessionManager({
    manager,
    rpc,
    db,
    dataDir: o.dataDir,
    limits: { bufferBytes: settings.sessionBufferBytes, perSandbox: settings.sessionsPerSandbox },
    log,
  });
  const offAudit = auditActivity({ audit, claims, bus, lifecycle: manager.events, sessionActor: (s, id) => sessions.keyOf(s, id) });
  const pruning = o.prune ?? true;
  const history = new MetricsHistory({ manager, rpc, history: store, intervalMs: settings.metricsIntervalMs, retentionMs: settings.metricsRetentionMs, prune: pruning, log });
  const network = new NetworkWatch({ bus, manager, log });
  if (settings.watchSandboxes) {
    watchers.start();
    network.start();
  } else log.warn("sandbox activity is not watched (--no-sandbox-activity): no exec.* / file.* events or audit entries for what runs inside sandboxes");
  sessions.start();
  history.start();
  const prune = () =>
    Promise.all([eventLog.prune(), audit.prune(), history.prune()]).catch((err: unknown) => log.error({ err }, "pruning the activity history failed"));
  let pruneTimer: NodeJS.Timeout | undefined;
  if (pruning) {
    void prune();
    pruneTimer = setInterval(prune, HOUR);
    pruneTimer.unref();
  }
  return {
    db,
    activityHistory: store,
    redactor,
    bus,
    events: feed ?? bus,
    watchers,
    audit,
    claims,
    sessions,
    history,
    workspaces: new Workspaces(manager, log),
    async quiesce(sandboxId) {
      await Promise.all([watchers.detach(sandboxId), sessions.detach(sandboxId)]);
      // Let the closes reach the socket before the VM stops.
      await new Promise((r) => setImmediate(r));
    },
    renderPrometheus() {
      let out = header("locale2b_events_total", "counter", "Events published, by type (workspace API names).");
      for (const [type, n] of bus.published) out += sample("locale2b_events_total", { type }, n);
      out += header("locale2b_event_subscribers", "gauge", "Event stream subscribers (SSE and Connect) connected now.");
      out += sample("locale2b_event_subscribers", {}, bus.subscriberCount + (feed?.subscriberCount ?? 0));
      out += header("locale2b_event_subscribers_overflowed_total", "counter", "Event stream subscribers disconnected because they fell too far behind.");
      out += sample("locale2b_event_subscribers_overflowed_total", {}, bus.overflowed + (feed?.overflowed ?? 0));
      out += header("locale2b_workspace_sessions_running", "gauge", "Background sessions (workspace API) running now.");
      out += sample("locale2b_workspace_sessions_running", {}, sessions.runningCount());
      return out + history.renderPrometheus();
    },
    async close() {
      clearInterval(pruneTimer);
      offLifecycle();
      offAudit();
      history.close();
      sessions.close();
      network.close();
      await watchers.close();
      feed?.close();
      await store.close();
      db.close();
    },
  };
}
