import { eventFilter, EventFilterError, listValues, type EventFilter } from "../../events/filter.js";
import type { SandboxEvent } from "../../events/types.js";
import type { WsContext } from "./context.js";
import type { WorkspaceDeps } from "./deps.js";
import { sendJson, WsError } from "./errors.js";
import { timeQuery } from "./metrics.js";
import { SseWriter } from "./sse.js";

/** What the event routes use: a fleet API replica serves them from Postgres with only these. */
export type EventsContext = Pick<WsContext, "req" | "res" | "query" | "signal"> & { deps: Pick<WorkspaceDeps, "events" | "log"> };

function filterOf(q: URLSearchParams): EventFilter {
  try {
    return eventFilter(listValues(q.getAll("sandbox_id")), listValues(q.getAll("event_type")));
  } catch (err) {
    if (err instanceof EventFilterError) throw new WsError(400, "invalid_request", err.message);
    throw err;
  }
}

function idQuery(raw: string | null | undefined, name: string): number | undefined {
  if (raw === null || raw === undefined || raw === "") return undefined;
  if (!/^\d+$/.test(raw)) throw new WsError(400, "invalid_request", `${name} must be an event id (a whole number), got '${raw}'`);
  return Number(raw);
}

/**
 * GET /events[?sandbox_id=&event_type=&since_id=&since=&limit=]: past
 * events from the event log, oldest first: {events, next_since_id}.
 */
export async function listEvents({ res, query, deps }: EventsContext): Promise<void> {
  const filter = filterOf(query);
  const afterId = idQuery(query.get("since_id"), "since_id") ?? 0;
  const sinceMs = timeQuery(query, "since");
  const limit = idQuery(query.get("limit"), "limit") ?? 1000;
  if (limit < 1 || limit > 10_000) throw new WsError(400, "invalid_request", "limit must be from 1 to 10000");
  const events = (await deps.events.log?.page(afterId, filter, limit, sinceMs)) ?? [];
  sendJson(res, 200, { events, next_since_id: events.at(-1)?.id ?? afterId });
}

/**
 * GET /events/stream[?sandbox_id=&event_type=&since_id=]: server-sent
 * events as they happen (`id:` is the event id, `event:` its type, `data:`
 * its JSON). With since_id (or a Last-Event-ID header, as EventSource sends
 * when it reconnects) it first replays the event log after that id, with
 * no gap and no duplicate between the replay and the live events.
 *
 * Back-pressure: each subscriber has a queue of SUBSCRIBER_QUEUE_LIMIT
 * events. A client that reads too slowly to keep it from filling up is
 * disconnected (its queue freed); it reconnects with its last id and
 * resumes from the log. A stalled consumer costs the server at most that
 * queue and one socket buffer, however much happens meanwhile.
 */
export async function streamEvents({ req, res, query, deps, signal }: EventsContext): Promise<void> {
  const filter = filterOf(query);
  const lastHeader = req.headers["last-event-id"];
  const resumeFrom = idQuery(query.get("since_id") ?? (typeof lastHeader === "string" ? lastHeader : undefined), "since_id (or Last-Event-ID)");
  const sub = deps.events.subscribe(filter);
  const startId = await deps.events.currentId().catch((err: unknown) => {
    sub.close();
    throw err;
  });
  const sse = new SseWriter(res, signal);
  sub.onOverflow = () => {
    deps.events.noteOverflow();
    deps.log.warn({ filter: { sandbox_ids: filter.sandboxIds && [...filter.sandboxIds], types: filter.types && [...filter.types] } }, "event stream subscriber fell too far behind: disconnected (it can resume with Last-Event-ID)");
    sse.destroy();
  };
  try {
    await sse.send("subscribed", { last_id: startId });
    let sent = resumeFrom ?? startId;
    const log = deps.events.log;
    if (resumeFrom !== undefined && log) {
      const oldest = await log.oldestId();
      if (oldest > resumeFrom + 1 && resumeFrom < startId) {
        await sse.send("gap", { after_id: resumeFrom, oldest_id: oldest, message: `events ${resumeFrom + 1} to ${oldest - 1} are older than the event log keeps (serve --event-retention-hours)` });
      }
      // Replay the log up to where the live queue starts.
      while (sent < startId && !sse.closed) {
        const page: SandboxEvent[] = (await log.page(sent, filter, 500)).filter((e) => e.id <= startId);
        if (page.length === 0) break;
        for (const e of page) if (!(await sse.send(e.event_type, e, e.id))) return;
        sent = page.at(-1)!.id;
        if (page.length < 500) break;
      }
      sent = Math.max(sent, startId);
    }
    for (;;) {
      const next = await sub.next(signal);
      if (next.kind !== "event") return;
      if (next.event.id <= sent) continue;
      if (!(await sse.send(next.event.event_type, next.event, next.event.id))) return;
    }
  } finally {
    sub.close();
    sse.end();
  }
}
