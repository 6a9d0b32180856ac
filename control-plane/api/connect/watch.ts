// WatchSandboxEvents: lifecycle events from the manager's bus, as they
// happen, through a bounded queue, until the client goes away.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import {
  SandboxEventType,
  type WatchSandboxEventsRequest,
  type WatchSandboxEventsResponseSchema,
} from "../../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import type { EventSource } from "../../events/event-source.js";
import { eventFilter, EventFilterError, listValues } from "../../events/filter.js";
import type { EventType, SandboxEvent } from "../../events/types.js";
import type { EventFilter, LifecycleBus } from "../../manager/events.js";
import type { LifecycleEvent, SandboxRecord } from "../../domain/sandbox.js";
import { eventTypeToProto, sandboxToProto } from "./convert.js";

type Out = MessageInitShape<typeof WatchSandboxEventsResponseSchema>;

/** Events a subscriber may fall behind by before its stream is ended. */
export const WATCH_QUEUE_LIMIT = 1024;

/**
 * A FIFO with one consumer: push never blocks; past `limit` unread items
 * the queue overflows and the consumer is told so instead of skipping.
 */
export class BoundedQueue<T> {
  private readonly items: T[] = [];
  private waiter: (() => void) | undefined;
  private overflowed = false;

  constructor(private readonly limit: number) {}

  push(item: T): void {
    if (this.overflowed) return;
    if (this.items.length >= this.limit) this.overflowed = true;
    else this.items.push(item);
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** The next item; `overflow` once items were dropped; `aborted` when the signal fires. */
  async next(signal: AbortSignal): Promise<{ kind: "item"; item: T } | { kind: "overflow" } | { kind: "aborted" }> {
    for (;;) {
      if (signal.aborted) return { kind: "aborted" };
      if (this.overflowed) return { kind: "overflow" };
      if (this.items.length) return { kind: "item", item: this.items.shift()! };
      await new Promise<void>((resolve) => {
        const onAbort = () => resolve();
        signal.addEventListener("abort", onAbort, { once: true });
        this.waiter = () => {
          signal.removeEventListener("abort", onAbort);
          resolve();
        };
      });
    }
  }
}

const LIFECYCLE_NAMES: Record<LifecycleEvent["type"], string> = {
  created: "sandbox.created",
  paused: "sandbox.paused",
  resumed: "sandbox.resumed",
  killed: "sandbox.destroyed",
  timed_out: "sandbox.timed_out",
};

export function eventToProto(e: LifecycleEvent): Out {
  return {
    type: eventTypeToProto(e.type),
    sandbox: sandboxToProto(e.sandbox),
    time: timestampFromMs(e.time),
    eventType: LIFECYCLE_NAMES[e.type],
    sandboxId: e.sandbox.id,
  };
}

const TYPES: Record<EventType, SandboxEventType> = {
  "sandbox.created": SandboxEventType.CREATED,
  "sandbox.paused": SandboxEventType.PAUSED,
  "sandbox.resumed": SandboxEventType.RESUMED,
  "sandbox.destroyed": SandboxEventType.KILLED,
  "exec.started": SandboxEventType.EXEC_STARTED,
  "exec.completed": SandboxEventType.EXEC_COMPLETED,
  "exec.failed": SandboxEventType.EXEC_FAILED,
  "file.read": SandboxEventType.FILE_READ,
  "file.written": SandboxEventType.FILE_WRITTEN,
  "network.request": SandboxEventType.NETWORK_REQUEST,
};

/** An event of the event bus (any API's) as a WatchSandboxEvents message. */
export function busEventToProto(e: SandboxEvent, sandbox: SandboxRecord | undefined): Out {
  const activity = e.event_type.startsWith("exec.") || e.event_type.startsWith("file.") || e.event_type === "network.request";
  return {
    type: TYPES[e.event_type],
    ...(!activity && sandbox ? { sandbox: sandboxToProto(sandbox) } : {}),
    time: timestampFromMs(Date.parse(e.timestamp)),
    eventType: e.event_type,
    sandboxId: e.sandbox_id,
    id: BigInt(e.id),
    ...(activity
      ? {
          activity: {
            sessionId: e.session_id ?? "",
            command: e.command ?? "",
            pid: e.pid ?? 0,
            ...(e.exit_code !== undefined ? { exitCode: e.exit_code } : {}),
            ...(e.duration_ms !== undefined ? { durationMs: BigInt(e.duration_ms) } : {}),
            path: e.path ?? "",
            ...(e.bytes !== undefined ? { bytes: BigInt(e.bytes) } : {}),
            error: e.error ?? "",
            cwd: e.cwd ?? "",
            user: e.user ?? "",
            protocol: e.protocol ?? "",
            destination: e.destination ?? "",
            port: e.port ?? 0,
          },
        }
      : {}),
  };
}

/**
 * The stream: SUBSCRIBED once the bus subscription is in place (so a client
 * knows nothing after it can be missed), then each matching event. A client
 * too slow to keep WATCH_QUEUE_LIMIT events in check gets RESOURCE_EXHAUSTED.
 * With event_types or after_id, the event log's events (watchLogged).
 */
export async function* watchEvents(
  bus: LifecycleBus,
  req: WatchSandboxEventsRequest,
  ctx: HandlerContext,
  limit = WATCH_QUEUE_LIMIT,
  events?: EventSource,
  lookup?: (id: string) => Promise<SandboxRecord | undefined>,
): AsyncGenerator<Out> {
  if ((req.eventTypes.length || req.afterId !== undefined) && events) {
    yield* watchLogged(events, req, ctx, lookup ?? (async () => undefined), limit);
    return;
  }
  const filter: EventFilter = {};
  if (req.sandboxId.trim()) filter.sandboxId = req.sandboxId.trim();
  if (Object.keys(req.metadata).length) filter.metadata = { ...req.metadata };
  const queue = new BoundedQueue<LifecycleEvent>(limit);
  const unsubscribe = bus.subscribe(filter, (e) => queue.push(e));
  try {
    yield { type: SandboxEventType.SUBSCRIBED, time: timestampFromMs(Date.now()) };
    for (;;) {
      const next = await queue.next(ctx.signal);
      if (next.kind === "aborted") return;
      if (next.kind === "overflow") {
        throw new ConnectError(
          `the client fell more than ${limit} events behind: list the sandboxes again and start a new watch`,
          Code.ResourceExhausted,
        );
      }
      yield eventToProto(next.item);
    }
  } finally {
    unsubscribe();
  }
}

/** Events replayed from the log per query while resuming. */
const REPLAY_PAGE = 500;

/**
 * The stream of logged events (the ones the workspace API's SSE stream
 * carries, with their ids): event_types' (sandbox.* without them), each
 * subscriber with its own bounded queue: one that falls `limit` behind gets
 * RESOURCE_EXHAUSTED and may resume with after_id. With after_id, the log's
 * events after it first: the live queue is subscribed before the log is
 * read, so the two meet with no gap, and the live events the replay already
 * sent are skipped by id. A fleet's API replica serves this from the fleet's
 * event log without asking a node (fleet/connect-api.ts).
 */
export async function* watchLogged(
  events: EventSource,
  req: WatchSandboxEventsRequest,
  ctx: HandlerContext,
  lookup: (id: string) => Promise<SandboxRecord | undefined>,
  limit = WATCH_QUEUE_LIMIT,
): AsyncGenerator<Out> {
  let filter;
  try {
    filter = eventFilter(req.sandboxId.trim() ? [req.sandboxId.trim()] : [], req.eventTypes.length ? listValues(req.eventTypes) : ["sandbox.*"]);
  } catch (err) {
    if (err instanceof EventFilterError) throw new ConnectError(err.message, Code.InvalidArgument);
    throw err;
  }
  const metadata = Object.entries(req.metadata);
  const matchesMetadata = new Map<string, boolean>();
  const wanted = async (sandboxId: string): Promise<boolean> => {
    if (metadata.length === 0) return true;
    let ok = matchesMetadata.get(sandboxId);
    if (ok === undefined) {
      const rec = await lookup(sandboxId);
      ok = !!rec && metadata.every(([k, v]) => rec.metadata[k] === v);
      matchesMetadata.set(sandboxId, ok);
    }
    return ok;
  };
  const toProto = async (e: SandboxEvent) => busEventToProto(e, e.event_type.startsWith("sandbox.") ? await lookup(e.sandbox_id) : undefined);
  const sub = events.subscribe(filter, limit);
  try {
    const startId = await events.currentId();
    let sent = startId;
    if (req.afterId !== undefined) {
      const after = Number(req.afterId);
      if (!Number.isSafeInteger(after)) throw new ConnectError(`after_id ${req.afterId} is not an event id`, Code.InvalidArgument);
      sent = Math.max(after, startId);
      if (events.log && after < startId) {
        // 0: the log is empty, so the events after `after` up to startId are gone too.
        const oldest = await events.log.oldestId();
        if (oldest === 0 || oldest > after + 1) {
          throw new ConnectError(
            `cannot resume after event ${after}: events ${after + 1} to ${oldest === 0 ? startId : oldest - 1} are older than the event log keeps (serve --event-retention-hours); list the sandboxes, then watch without after_id`,
            Code.OutOfRange,
          );
        }
      }
    }
    yield { type: SandboxEventType.SUBSCRIBED, time: timestampFromMs(Date.now()), id: BigInt(startId) };
    // With after_id, the log up to where the live queue starts.
    for (let at = Number(req.afterId ?? startId); at < startId && events.log; ) {
      const page = (await events.log.page(at, filter, REPLAY_PAGE)).filter((e) => e.id <= startId);
      for (const e of page) if (await wanted(e.sandbox_id)) yield await toProto(e);
      if (page.length < REPLAY_PAGE) break;
      at = page.at(-1)!.id;
    }
    for (;;) {
      const next = await sub.next(ctx.signal);
      if (next.kind === "closed") return;
      if (next.kind === "overflow") {
        events.noteOverflow();
        throw new ConnectError(`the client fell more than ${limit} events behind: resume with after_id (the last id received), or list the sandboxes again and start a new watch`, Code.ResourceExhausted);
      }
      const e = next.event;
      if (e.id <= sent || !(await wanted(e.sandbox_id))) continue;
      yield await toProto(e);
    }
  } finally {
    sub.close();
  }
}
