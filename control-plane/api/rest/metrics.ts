import { ControlPlaneError } from "../../domain/errors.js";
import { HttpError, sendJson } from "./errors.js";
import type { RestContext, Route } from "./router.js";
import type { MetricSample } from "../../metrics/history.js";
import { toMetric } from "./serialize.js";

/** A history sample as E2B's SandboxMetric. */
export function sampleToMetric(s: MetricSample): Record<string, unknown> {
  return toMetric(
    { cpuCount: s.cpuCount, cpuUsedPct: s.cpuUsedPct, memUsedBytes: s.memUsed, memTotalBytes: s.memTotal, diskUsedBytes: s.diskUsed, diskTotalBytes: s.diskTotal },
    s.time,
  );
}

function unixSeconds(query: URLSearchParams, name: string): number | undefined {
  const raw = query.get(name);
  if (raw === null || raw === "") return undefined;
  if (!/^\d+$/.test(raw)) throw new HttpError(400, `invalid ${name} '${raw}': expected unix seconds`);
  return Number(raw);
}

/** `start` and `end` (unix seconds) as checked (400 when bad); undefined where not given. */
export function metricsRangeQuery(query: URLSearchParams): { start?: number; end?: number } {
  const start = unixSeconds(query, "start");
  const end = unixSeconds(query, "end");
  if (start !== undefined && end !== undefined && start > end) throw new HttpError(400, `start (${start}) is after end (${end})`);
  return { ...(start !== undefined ? { start } : {}), ...(end !== undefined ? { end } : {}) };
}

/** The range in ms a metrics query covers: from the sandbox's start (default) to now (default); `end` covers its whole second. */
export function metricsRangeMs(q: { start?: number; end?: number }, startedAt: number, now: number): { fromMs: number; toMs: number } {
  return { fromMs: q.start !== undefined ? q.start * 1000 : startedAt - 1000, toMs: q.end !== undefined ? q.end * 1000 + 999 : now };
}

/** The sandbox ids of GET /sandboxes/metrics (400 when none or more than 100). */
export function metricsIdsQuery(query: URLSearchParams): string[] {
  const ids = [
    ...new Set(
      query
        .getAll("sandbox_ids")
        .flatMap((s) => s.split(","))
        .map((s) => s.trim())
        .filter(Boolean),
    ),
  ];
  if (ids.length === 0) throw new HttpError(400, "query parameter 'sandbox_ids' is required (comma-separated sandbox ids)");
  if (ids.length > 100) throw new HttpError(400, `at most 100 sandbox_ids per request, got ${ids.length}`);
  return ids;
}

/**
 * GET /sandboxes/{id}/metrics[?start=&end=] (unix seconds): the samples of
 * the metrics history in that range (default: from the sandbox's start to
 * now), oldest first. A range that reaches now but has no sample yet (a
 * sandbox younger than the sampling interval) gets one taken now.
 */
async function sandboxMetrics({ res, params, query, deps }: RestContext): Promise<void> {
  const range = metricsRangeQuery(query);
  const rec = deps.manager.get(params.sandboxID!);
  if (!deps.history) {
    sendJson(res, 200, [toMetric((await deps.manager.stats(rec.id)).stats)]);
    return;
  }
  const now = Date.now();
  const { fromMs, toMs } = metricsRangeMs(range, rec.startedAt, now);
  const samples = await deps.history.range(rec.id, fromMs, toMs);
  if (samples.length === 0 && toMs >= now - deps.history.intervalMs && rec.state === "running") {
    const s = await deps.history.sampleOne(rec.id);
    if (s) samples.push(s);
  }
  sendJson(res, 200, samples.map(sampleToMetric));
}

/** GET /sandboxes/metrics?sandbox_ids=a,b: the latest sample of each existing sandbox (unknown ids are left out). */
async function manyMetrics({ res, query, deps }: RestContext): Promise<void> {
  const ids = metricsIdsQuery(query);
  const sandboxes: Record<string, unknown> = {};
  await Promise.all(
    ids.map(async (id) => {
      try {
        const latest = deps.history?.latestOf(id) ?? (deps.manager.get(id).state === "running" ? await deps.history?.sampleOne(id) : undefined);
        sandboxes[id] = latest ? sampleToMetric(latest) : toMetric((await deps.manager.stats(id)).stats);
      } catch (err) {
        if (!(err instanceof ControlPlaneError && (err.kind === "not_found" || err.kind === "unavailable"))) throw err;
      }
    }),
  );
  sendJson(res, 200, { sandboxes });
}

export const metricRoutes: Route[] = [
  // Literal: the router must try it before `/sandboxes/:sandboxID`.
  { method: "GET", path: "/sandboxes/metrics", handler: manyMetrics },
  { method: "GET", path: "/sandboxes/:sandboxID/metrics", handler: sandboxMetrics },
];
