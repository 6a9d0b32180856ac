// Activity history through a fleet API replica, read from the fleet's
// Postgres (where every node writes it): the workspace API's event list,
// event stream and audit export, and E2B's metrics routes. No node is asked
// for history, so a lost node's stays readable; only a sample taken now (a
// running sandbox with none yet in the range) comes from its node.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import { DEFAULT_ACTIVITY } from "../activity.js";
import { HttpError } from "../api/rest/errors.js";
import { metricsIdsQuery, metricsRangeMs, metricsRangeQuery, sampleToMetric } from "../api/rest/metrics.js";
import { exportAudit } from "../api/workspace/audit.js";
import { metricsWindow, sampleJson } from "../api/workspace/metrics.js";
import { sendWsError, WsError, wsErrorFrom } from "../api/workspace/errors.js";
import { listEvents, streamEvents } from "../api/workspace/events.js";
import type { NodeRecord } from "../domain/node.js";
import { LIVE_STATES } from "../domain/sandbox.js";
import { EventFeed } from "../events/event-feed.js";
import { EventLog } from "../events/event-log.js";
import type { EventSource } from "../events/event-source.js";
import type { ActivityHistory } from "../store/activity-history.js";
import type { Store } from "../store/store.js";
import { sendError, sendJson, type Json } from "./respond.js";
import type { NodeAnswer } from "./workspace-routes.js";

export interface HistoryRouting {
  store: Store;
  history: ActivityHistory;
  log: Logger;
  readNodes(): Promise<NodeRecord[]>;
  live(n: NodeRecord): boolean;
  /** The request as it came, to node `n`. */
  forward(req: IncomingMessage, res: ServerResponse, n: NodeRecord, sandboxId?: string): void;
  call(n: NodeRecord, req: IncomingMessage, path: string): Promise<NodeAnswer>;
}

export interface FleetHistory {
  /** GET /workspace/events, /workspace/events/stream, /workspace/audit (any sandbox_id, or none: the whole fleet's). */
  workspace(req: IncomingMessage, res: ServerResponse, sub: "/events" | "/events/stream" | "/audit"): Promise<void>;
  /**
   * The workspace API's GET /sandboxes/{id}/metrics of a sandbox whose node
   * is lost: serve's shape, status `lost` (and why), the last sample as the
   * current figures, the range's samples.
   */
  lostSandboxMetrics(req: IncomingMessage, res: ServerResponse, sandboxId: string, why: string): Promise<void>;
  /** E2B's GET /sandboxes/{id}/metrics[?start=&end=]. */
  sandboxMetrics(req: IncomingMessage, res: ServerResponse, sandboxId: string): Promise<void>;
  /** The fleet's event log as it grows: the workspace API's stream and the Connect API's WatchSandboxEvents read it. */
  readonly feed: EventSource;
  /** E2B's GET /sandboxes/metrics?sandbox_ids=…. */
  manyMetrics(req: IncomingMessage, res: ServerResponse): Promise<void>;
  close(): void;
}

export function fleetHistory(f: HistoryRouting): FleetHistory {
  const { store, history, log } = f;
  const eventLog = new EventLog(history, DEFAULT_ACTIVITY.eventRetentionMs);
  const feed = new EventFeed(eventLog, log.child({ component: "event-feed" }));
  const deps = { events: feed, audit: { query: history.audit.bind(history) }, log };
  const handlers = { "/events": listEvents, "/events/stream": streamEvents, "/audit": exportAudit };

  /** Any thrown value as E2B REST answers it. */
  const restFailure = (res: ServerResponse, err: unknown) => {
    if (err instanceof HttpError) return sendError(res, err.status, err.message);
    log.error({ err }, "reading activity history failed");
    sendError(res, 500, `reading the fleet's activity history failed: ${(err as Error).message}`);
  };

  return {
    feed,

    async workspace(req, res, sub) {
      const abort = new AbortController();
      res.once("close", () => abort.abort());
      const query = new URL(req.url ?? "/", "http://api").searchParams;
      try {
        await handlers[sub]({ req, res, query, deps, signal: abort.signal });
      } catch (err) {
        const failure = wsErrorFrom(err);
        if (!failure) log.error({ err }, "reading activity history failed");
        if (!abort.signal.aborted) sendWsError(res, failure ?? new WsError(500, "internal", `reading the fleet's activity history failed: ${(err as Error).message}`));
      }
    },

    async lostSandboxMetrics(req, res, sandboxId, why) {
      try {
        const { start, end } = metricsWindow(new URL(req.url ?? "/", "http://api").searchParams);
        const [samples, latest] = await Promise.all([history.samples(sandboxId, start, end), history.latestSamples([sandboxId])]);
        const current = latest.get(sandboxId);
        sendJson(res, 200, {
          sandbox_id: sandboxId,
          status: "lost",
          message: why,
          ...(current ? sampleJson(current) : { timestamp: null }),
          interval_seconds: DEFAULT_ACTIVITY.metricsIntervalMs / 1000,
          samples: samples.map(sampleJson),
        });
      } catch (err) {
        const failure = wsErrorFrom(err);
        if (!failure) log.error({ err }, "reading activity history failed");
        sendWsError(res, failure ?? new WsError(500, "internal", `reading the fleet's activity history failed: ${(err as Error).message}`));
      }
    },

    async sandboxMetrics(req, res, sandboxId) {
      try {
        const range = metricsRangeQuery(new URL(req.url ?? "/", "http://api").searchParams);
        const rec = await store.getSandbox(sandboxId);
        // As serve: a killed sandbox (the store keeps its record a while) is not found.
        if (!rec || !LIVE_STATES.includes(rec.state)) return sendError(res, 404, `sandbox '${sandboxId}' not found`);
        const now = Date.now();
        const { fromMs, toMs } = metricsRangeMs(range, rec.startedAt, now);
        const samples = await history.samples(rec.id, fromMs, toMs);
        // None yet in a range that reaches now: the node takes one now, as serve does.
        if (samples.length === 0 && toMs >= now - DEFAULT_ACTIVITY.metricsIntervalMs && rec.state === "running") {
          const n = (await f.readNodes()).find((x) => x.name === rec.node);
          if (n && f.live(n)) return f.forward(req, res, n, sandboxId);
        }
        sendJson(res, 200, samples.map(sampleToMetric));
      } catch (err) {
        restFailure(res, err);
      }
    },

    async manyMetrics(req, res) {
      try {
        const ids = metricsIdsQuery(new URL(req.url ?? "/", "http://api").searchParams);
        const answers = await Promise.all((await f.readNodes()).filter(f.live).map((n) => f.call(n, req, req.url ?? "/").catch(() => undefined)));
        const bad = answers.find((a) => a && a.status !== 200);
        if (bad) return void res.writeHead(bad.status, { "content-type": "application/json" }).end(bad.body);
        const sandboxes: Json = {};
        for (const a of answers) if (a) Object.assign(sandboxes, (JSON.parse(a.body.toString("utf8")) as { sandboxes: Json }).sandboxes);
        // Sandboxes no live node answered for (their node is lost): their last sample in the history.
        const rest = ids.filter((id) => !(id in sandboxes));
        const known = (await Promise.all(rest.map((id) => store.getSandbox(id)))).filter((r) => r !== undefined && LIVE_STATES.includes(r.state)).map((r) => r!.id);
        for (const [id, s] of await history.latestSamples(known)) sandboxes[id] = sampleToMetric(s);
        sendJson(res, 200, { sandboxes });
      } catch (err) {
        restFailure(res, err);
      }
    },

    close() {
      feed.close();
    },
  };
}
