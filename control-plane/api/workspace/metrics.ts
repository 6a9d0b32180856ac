import type { MetricSample } from "../../metrics/history.js";
import type { WsContext } from "./context.js";
import { sendJson, WsError } from "./errors.js";

/** A time as unix seconds or ISO 8601. */
export function timeQuery(q: URLSearchParams, name: string): number | undefined {
  const raw = q.get(name);
  if (raw === null || raw === "") return undefined;
  if (/^\d+(\.\d+)?$/.test(raw)) return Number(raw) * 1000;
  const ms = Date.parse(raw);
  if (Number.isNaN(ms)) throw new WsError(400, "invalid_request", `query '${name}' must be unix seconds or an ISO 8601 time, got '${raw}'`);
  return ms;
}

export function sampleJson(s: MetricSample): Record<string, unknown> {
  return {
    timestamp: new Date(s.time).toISOString(),
    cpu_percent: s.cpuUsedPct,
    cpu_count: s.cpuCount,
    memory_used_bytes: s.memUsed,
    memory_total_bytes: s.memTotal,
    memory_percent: s.memTotal ? Math.round((s.memUsed / s.memTotal) * 10000) / 100 : null,
    disk_used_bytes: s.diskUsed,
    disk_total_bytes: s.diskTotal,
    disk_read_bytes: s.diskReadBytes,
    disk_write_bytes: s.diskWriteBytes,
    network_rx_bytes: s.netRxBytes,
    network_tx_bytes: s.netTxBytes,
  };
}

/** The range of the metrics route: start and end (default: the last 5 minutes); 400 when start is after end. */
export function metricsWindow(query: URLSearchParams): { start: number; end: number } {
  const end = timeQuery(query, "end") ?? Date.now();
  const start = timeQuery(query, "start") ?? end - 5 * 60_000;
  if (start > end) throw new WsError(400, "invalid_request", "start is after end");
  return { start, end };
}

/**
 * GET /sandboxes/{id}/metrics[?start=&end=]: the current CPU, memory, disk
 * and I/O figures at the top level, and `samples`, the history between
 * start and end (default: the last 5 minutes). I/O counters are cumulative
 * bytes; network ones are null where the sandbox shares the host's network.
 */
export async function sandboxMetrics({ res, params, query, deps }: WsContext): Promise<void> {
  const rec = deps.manager.get(params.id!);
  const { start, end } = metricsWindow(query);
  const current = rec.state === "running" ? ((await deps.history.sampleOne(rec.id)) ?? deps.history.latestOf(rec.id)) : deps.history.latestOf(rec.id);
  sendJson(res, 200, {
    sandbox_id: rec.id,
    status: rec.state === "running" ? "running" : rec.state,
    ...(current ? sampleJson(current) : { timestamp: null }),
    interval_seconds: deps.history.intervalMs / 1000,
    samples: (await deps.history.range(rec.id, start, end)).map(sampleJson),
  });
}
