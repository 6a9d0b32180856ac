import type { MessageInitShape } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import type { WatchActivityRequest, WatchActivityResponseSchema } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import type { ActivityLog } from "./log.js";

type Out = MessageInitShape<typeof WatchActivityResponseSchema>;

/**
 * WatchActivity: a first message naming the stream, then every retained
 * event after the client's cursor, then live ones. It reads the log at the
 * client's pace (the next event is taken only once the previous one was
 * written), so a slow client costs envd nothing but falls behind; past the
 * ring it is told how many events it missed.
 */
export async function* watchActivity(log: ActivityLog, req: WatchActivityRequest, ctx: HandlerContext): AsyncGenerator<Out> {
  let cursor = req.streamId === log.streamId ? Number(req.afterSeq) : 0;
  yield { streamId: log.streamId };
  while (!ctx.signal.aborted) {
    const changed = log.changed(ctx.signal);
    const { events, dropped } = log.since(cursor);
    if (events.length === 0) {
      await changed;
      continue;
    }
    let gap = dropped;
    for (const event of events) {
      yield { streamId: log.streamId, event, dropped: BigInt(gap) };
      gap = 0;
      cursor = Number(event.seq);
    }
  }
}
