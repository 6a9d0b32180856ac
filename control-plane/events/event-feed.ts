import type { Logger } from "pino";
import { SUBSCRIBER_QUEUE_LIMIT } from "./bus.js";
import type { EventLog } from "./event-log.js";
import type { EventSource } from "./event-source.js";
import { matchesEvent, type EventFilter } from "./filter.js";
import { Subscription } from "./subscription.js";

/** How often the log is read for new events while anyone is subscribed. */
export const FEED_POLL_MS = 250;
/** Events read per query. */
const PAGE = 1000;

/**
 * New events from an event log that other hosts write too (the fleet's
 * Postgres), for event streams: while anyone is subscribed, one query every
 * FEED_POLL_MS reads the events after the last one seen and hands each to
 * the matching subscriptions (each with its bounded queue, as EventBus's).
 *
 * Polling rather than LISTEN/NOTIFY: one indexed range query per process
 * (not per stream) and only while a stream is open; LISTEN would need a
 * connection of its own outside the pool, re-listening after every
 * reconnect, and a read after each notification all the same (a payload
 * holds 8000 bytes, and a notification missed while reconnecting is gone);
 * writers batch every ~200 ms anyway, so a stream sees an event about
 * 200-450 ms after it happened either way.
 */
export class EventFeed implements EventSource {
  private readonly subs = new Map<Subscription, EventFilter>();
  /** The last id read; set (from the log's newest) when the first subscriber comes. */
  private seen: Promise<number> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  overflowed = 0;

  constructor(
    readonly log: EventLog,
    private readonly logger: Logger,
    private readonly pollMs = FEED_POLL_MS,
    private readonly subscriberLimit = SUBSCRIBER_QUEUE_LIMIT,
  ) {}

  get subscriberCount(): number {
    return this.subs.size;
  }

  subscribe(filter: EventFilter, limit = this.subscriberLimit): Subscription {
    const sub = new Subscription(limit, (s) => this.subs.delete(s));
    this.subs.set(sub, filter);
    if (!this.seen) {
      this.seen = this.log.lastId();
      // A failed first read: the next subscriber tries again.
      this.seen.catch(() => (this.seen = undefined));
    }
    this.timer ??= setInterval(() => void this.poll(), this.pollMs);
    return sub;
  }

  currentId(): Promise<number> {
    return this.seen ?? this.log.lastId();
  }

  noteOverflow(): void {
    this.overflowed++;
  }

  private async poll(): Promise<void> {
    if (this.polling) return;
    if (this.subs.size === 0) {
      // Nobody left: stop reading; the next subscriber starts from the log's newest again.
      clearInterval(this.timer);
      this.timer = undefined;
      this.seen = undefined;
      return;
    }
    this.polling = true;
    try {
      this.seen ??= this.log.lastId();
      let after = await this.seen;
      for (;;) {
        const page = await this.log.page(after, {}, PAGE);
        // No await from here to `seen`'s update: a stream subscribing meanwhile either gets these or starts after them.
        for (const e of page) {
          for (const [sub, filter] of this.subs) if (matchesEvent(filter, e)) sub.push(e);
        }
        if (page.length === 0) break;
        after = page.at(-1)!.id;
        this.seen = Promise.resolve(after);
        if (page.length < PAGE) break;
      }
    } catch (err) {
      this.logger.warn({ err }, "reading new events from the event log failed: retrying");
    } finally {
      this.polling = false;
    }
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
    for (const sub of [...this.subs.keys()]) sub.close();
  }
}
