import type { MessageInitShape } from "@bufbuild/protobuf";
import { setTimeout as sleep } from "node:timers/promises";
import type { HandlerContext } from "@connectrpc/connect";
import type { WatchActivityRequest, WatchActivityResponseSchema } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import type { ActivityLog } from "./log.js";

type Out = MessageInitShape<typeof WatchActivityResponseSchema>;

/**
 * How long a watch gathers events after the first new one before it sends
 * them, so that a short command's start and end go out as one message (one
 * write here, one read and one parse at the control plane, instead of two).
 */
export const ACTIVITY_BATCH_MS = 15;

/** Events in one message at most (a replay after a long absence is sent in parts). */
export const ACTIVITY_BATCH_MAX = 256;

/**
 * WatchActivity: a first message naming the stream, then every retained
 * event after the client's cursor (at once), then live ones, gathered for
 * ACTIVITY_BATCH_MS. It reads the log at the client's pace (the next batch
 * is taken only once the previous one was written), so a slow client costs
 * envd nothing but falls behind; past the ring it is told how many events it
 * missed.
 */
export async function* watchActivity(
  log: ActivityLog,
  req: WatchActivityRequest,
  ctx: HandlerContext,
  batchMs = ACTIVITY_BATCH_MS,
): AsyncGenerator<Out> {
  let cursor = req.streamId === log.streamId ? Number(req.afterSeq) : 0;
  yield { streamId: log.streamId };
  while (!ctx.signal.aborted) {
    const changed = log.changed(ctx.signal);
    const { events, dropped } = log.since(cursor, ACTIVITY_BATCH_MAX);
    if (events.length === 0) {
      await changed;
      await sleep(batchMs, undefined, { signal: ctx.signal }).catch(() => undefined); // ends early when the call does
      continue;
    }
    yield { streamId: log.streamId, events, dropped: BigInt(dropped) };
    cursor = Number(events[events.length - 1]!.seq);
  }
}
