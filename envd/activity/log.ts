import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { randomBytes } from "node:crypto";
import {
  ActivityEventSchema,
  type ActivityEvent,
  type FileRead,
  type FileWritten,
  type PathChanged,
  type ProcessEnded,
  type ProcessFailed,
  type ProcessStarted,
} from "../../gen/ts/locale2b/envd/v1/activity_pb.js";

/** Events envd keeps for a watcher that is away (the control plane restarting) or slow. */
export const ACTIVITY_RETAINED = 2048;

type Fields<T> = Omit<T, "$typeName" | "$unknown">;

export type Activity =
  | { case: "processStarted"; value: Fields<ProcessStarted> }
  | { case: "processEnded"; value: Fields<ProcessEnded> }
  | { case: "processFailed"; value: Fields<ProcessFailed> }
  | { case: "fileRead"; value: Fields<FileRead> }
  | { case: "fileWritten"; value: Fields<FileWritten> }
  | { case: "pathChanged"; value: Fields<PathChanged> };

/**
 * What happened in this sandbox (processes, file transfers), numbered and
 * kept in a ring of the last `retained` events, so that a watcher that was
 * away (the control plane restarting) or slow catches up from where it was.
 * Emitting costs one small object and a wake-up: it sits on every process
 * start and end, the hot path of `commands.run`.
 */
export class ActivityLog {
  /** A new sequence per envd start: seq numbers begin at 1 again. */
  readonly streamId = randomBytes(8).toString("hex");
  private seq = 0;
  private readonly ring: ActivityEvent[] = [];
  private waiters: (() => void)[] = [];

  constructor(private readonly retained = ACTIVITY_RETAINED) {}

  get lastSeq(): number {
    return this.seq;
  }

  emit(activity: Activity): void {
    const event = create(ActivityEventSchema, {
      seq: BigInt(++this.seq),
      time: timestampNow(),
      event: activity as ActivityEvent["event"],
    });
    this.ring.push(event);
    if (this.ring.length > this.retained) this.ring.shift();
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Retained events after `afterSeq` (at most `max`), and how many between it and the oldest retained are gone. */
  since(afterSeq: number, max = this.retained): { events: ActivityEvent[]; dropped: number } {
    const oldest = this.ring.length ? Number(this.ring[0]!.seq) : this.seq + 1;
    const dropped = Math.max(0, oldest - afterSeq - 1);
    const start = Math.max(0, afterSeq - oldest + 1);
    return { events: start >= this.ring.length ? [] : this.ring.slice(start, start + max), dropped };
  }

  /** Resolves at the next emit, or when `signal` aborts. */
  changed(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        signal.removeEventListener("abort", done);
        resolve();
      };
      this.waiters.push(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}
