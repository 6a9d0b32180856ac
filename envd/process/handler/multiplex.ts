/**
 * Fans one process's output out to every subscribed stream, with
 * back-pressure: `publish` reports when a subscriber's queue is full, and the
 * producer pauses the pipe until every queue has drained below the mark. A
 * subscriber therefore never loses output; a slow one slows the process (as
 * E2B's envd does). With no subscriber, output is dropped, not queued.
 */
export interface Sized {
  size: number;
  /**
   * Called once every subscriber is done with the item (a pooled buffer goes
   * back): when the next item is asked for, or the subscriber closes.
   */
  release?: () => void;
}

const HIGH_WATER_BYTES = 1 << 20;

export type Next<T> = { kind: "item"; item: T } | { kind: "end" } | { kind: "timeout" };

export class Subscriber<T extends Sized> {
  private readonly queue: T[] = [];
  private queuedBytes = 0;
  private ended = false;
  private wake: (() => void) | undefined;
  private drainWaiters: (() => void)[] = [];
  /** The item last handed out: its consumer is done with it once it asks for the next. */
  private held: T | undefined;

  constructor(private readonly onClose: (s: Subscriber<T>) => void) {}

  /** Queues an item; false when the queue is over its high-water mark. */
  push(item: T): boolean {
    this.queue.push(item);
    this.queuedBytes += item.size;
    this.wake?.();
    return this.queuedBytes < HIGH_WATER_BYTES;
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  /** Resolves once the queue is below the high-water mark (or the subscriber is gone). */
  drained(): Promise<void> {
    if (this.queuedBytes < HIGH_WATER_BYTES) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  /**
   * The next item, or `end` once ended and empty, or `timeout` after
   * `timeoutMs` without anything. Rejects when `signal` aborts.
   */
  async next(timeoutMs: number, signal: AbortSignal): Promise<Next<T>> {
    this.letGo();
    for (;;) {
      const item = this.queue.shift();
      if (item) {
        this.queuedBytes -= item.size;
        if (this.queuedBytes < HIGH_WATER_BYTES && this.drainWaiters.length) this.releaseDrainWaiters();
        this.held = item;
        return { kind: "item", item };
      }
      if (this.ended) return { kind: "end" };
      signal.throwIfAborted();
      const woke = await new Promise<boolean>((resolve, reject) => {
        const timer = setTimeout(() => done(false), timeoutMs);
        const onAbort = () => {
          cleanup();
          reject(signal.reason);
        };
        const done = (v: boolean) => {
          cleanup();
          resolve(v);
        };
        const cleanup = () => {
          clearTimeout(timer);
          signal.removeEventListener("abort", onAbort);
          this.wake = undefined;
        };
        this.wake = () => done(true);
        signal.addEventListener("abort", onAbort, { once: true });
      });
      if (!woke) return { kind: "timeout" };
    }
  }

  /** Unsubscribes; anything still queued is dropped and the producer is released. */
  close(): void {
    this.letGo();
    for (const item of this.queue) item.release?.();
    this.queue.length = 0;
    this.queuedBytes = 0;
    this.ended = true;
    this.releaseDrainWaiters();
    this.onClose(this);
  }

  private letGo(): void {
    this.held?.release?.();
    this.held = undefined;
  }

  private releaseDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }
}

export class Multiplexer<T extends Sized> {
  private readonly subscribers = new Set<Subscriber<T>>();
  private closed = false;

  subscribe(): Subscriber<T> {
    const s = new Subscriber<T>((sub) => this.subscribers.delete(sub));
    if (this.closed) s.end();
    else this.subscribers.add(s);
    return s;
  }

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  /**
   * Delivers to every subscriber. Returns undefined when all have room, or a
   * promise that resolves when every full one has drained.
   */
  publish(item: T): Promise<void> | undefined {
    const release = item.release;
    if (release) {
      let refs = this.subscribers.size;
      if (refs === 0) {
        release();
        return undefined;
      }
      if (refs > 1) item.release = () => void (--refs === 0 && release());
    }
    let full: Subscriber<T>[] | undefined;
    for (const s of this.subscribers) {
      if (!s.push(item)) (full ??= []).push(s);
    }
    if (!full) return undefined;
    return Promise.all(full.map((s) => s.drained())).then(() => undefined);
  }

  /** Ends every subscription after what is queued. */
  close(): void {
    this.closed = true;
    for (const s of this.subscribers) s.end();
  }
}
