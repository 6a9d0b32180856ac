import type { SandboxEvent } from "./types.js";

export type Next = { kind: "event"; event: SandboxEvent } | { kind: "overflow" } | { kind: "closed" };

/**
 * One subscriber's queue: the bus pushes without ever waiting; the reader
 * takes at its own pace. Past `limit` unread events the subscription
 * overflows: nothing more is queued and the reader is told (and is then
 * disconnected by its transport): a stalled consumer costs at most `limit`
 * events of memory, never more.
 */
export class Subscription {
  private readonly queue: SandboxEvent[] = [];
  private head = 0;
  private waiter: (() => void) | undefined;
  private overflowed = false;
  private closed = false;
  /** Called once, when the subscription overflows (its transport disconnects the reader). */
  onOverflow: (() => void) | undefined;

  constructor(
    private readonly limit: number,
    private readonly onClose: (s: Subscription) => void,
  ) {}

  get queued(): number {
    return this.queue.length - this.head;
  }

  push(e: SandboxEvent): void {
    if (this.overflowed || this.closed) return;
    if (this.queued < this.limit) {
      this.queue.push(e);
      this.wake();
      return;
    }
    this.overflowed = true;
    this.queue.length = 0;
    this.head = 0;
    this.wake();
    this.onOverflow?.();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** The next event, `overflow` once the reader fell `limit` behind, `closed` after close() or when `signal` aborts. */
  async next(signal?: AbortSignal): Promise<Next> {
    for (;;) {
      if (this.closed || signal?.aborted) return { kind: "closed" };
      if (this.overflowed) return { kind: "overflow" };
      if (this.head < this.queue.length) {
        const event = this.queue[this.head++]!;
        if (this.head > 1024 && this.head * 2 > this.queue.length) {
          this.queue.splice(0, this.head);
          this.head = 0;
        }
        return { kind: "event", event };
      }
      await new Promise<void>((resolve) => {
        const onAbort = () => resolve();
        signal?.addEventListener("abort", onAbort, { once: true });
        this.waiter = () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        };
      });
    }
  }

  /** Takes what is queued without waiting. */
  drain(): SandboxEvent[] {
    const out = this.queue.slice(this.head);
    this.queue.length = 0;
    this.head = 0;
    return out;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.queue.length = 0;
    this.head = 0;
    this.wake();
    this.onClose(this);
  }
}
