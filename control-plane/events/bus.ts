import { EventEmitter } from "node:events";
import type { EventLog } from "./event-log.js";
import type { EventSource } from "./event-source.js";
import { matchesEvent, type EventFilter } from "./filter.js";
import { Subscription } from "./subscription.js";
import type { NewEvent, SandboxEvent } from "./types.js";

/** Unread events a subscriber may have before it is cut off (it resumes from the log with its last id). */
export const SUBSCRIBER_QUEUE_LIMIT = 2000;

/**
 * The one place events go through: numbered, written to the event log,
 * handed to every matching subscriber (each with its own bounded queue: a
 * slow one never slows the others or the server) and to in-process
 * listeners (metrics, audit). Where the log numbers events itself (the
 * fleet's Postgres: ids are fleet-wide), an event is handed on once it is
 * written and has its id, a batch (~200 ms) later.
 */
export class EventBus implements EventSource {
  private lastId: number;
  private readonly subs = new Map<Subscription, EventFilter>();
  private readonly listeners = new EventEmitter();
  /** Subscribers cut off because they fell too far behind. */
  overflowed = 0;
  readonly published = new Map<string, number>();

  constructor(
    readonly log?: EventLog,
    /** Default queue limit of a subscriber. */
    private readonly subscriberLimit = SUBSCRIBER_QUEUE_LIMIT,
    /** The highest id already in the log (numbering continues after it). */
    startId = 0,
  ) {
    this.lastId = startId;
    this.listeners.setMaxListeners(0);
  }

  get subscriberCount(): number {
    return this.subs.size;
  }

  async currentId(): Promise<number> {
    return this.lastId;
  }

  /** The event, numbered: at once (SQLite), or once written (Postgres: its id is 0 until then). */
  publish(e: NewEvent): SandboxEvent {
    const { time, ...rest } = e;
    const event: SandboxEvent = { id: 0, ...rest, timestamp: new Date(time ?? Date.now()).toISOString() };
    this.published.set(event.event_type, (this.published.get(event.event_type) ?? 0) + 1);
    if (this.log?.numbers) {
      // Lost if it cannot be written (the history logs that): it is handed on only with a real id.
      this.log.append(event).then(
        (id) => {
          event.id = id;
          this.lastId = Math.max(this.lastId, id);
          this.dispatch(event);
        },
        () => undefined,
      );
      return event;
    }
    event.id = ++this.lastId;
    void this.log?.append(event);
    this.dispatch(event);
    return event;
  }

  private dispatch(event: SandboxEvent): void {
    for (const [sub, filter] of this.subs) {
      if (!matchesEvent(filter, event)) continue;
      sub.push(event);
    }
    this.listeners.emit("event", event);
  }

  /** A queue of the matching events published from now on; close() it when done. */
  subscribe(filter: EventFilter, limit = this.subscriberLimit): Subscription {
    const sub = new Subscription(limit, (s) => this.subs.delete(s));
    this.subs.set(sub, filter);
    return sub;
  }

  /** Cut-off accounting for transports: call when a subscription overflowed. */
  noteOverflow(): void {
    this.overflowed++;
  }

  /** In-process listener for every event (synchronous, must be cheap); returns the unsubscribe. */
  on(listener: (e: SandboxEvent) => void): () => void {
    this.listeners.on("event", listener);
    return () => this.listeners.off("event", listener);
  }
}
