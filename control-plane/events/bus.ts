import { EventEmitter } from "node:events";
import type { EventLog } from "./event-log.js";
import { matchesEvent, type EventFilter } from "./filter.js";
import { Subscription } from "./subscription.js";
import type { NewEvent, SandboxEvent } from "./types.js";

/** Unread events a subscriber may have before it is cut off (it resumes from the log with its last id). */
export const SUBSCRIBER_QUEUE_LIMIT = 2000;

/**
 * The one place events go through: numbered, written to the event log,
 * handed to every matching subscriber (each with its own bounded queue: a
 * slow one never slows the others or the server) and to in-process
 * listeners (metrics, audit).
 */
export class EventBus {
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
  ) {
    this.lastId = log?.lastId() ?? 0;
    this.listeners.setMaxListeners(0);
  }

  get subscriberCount(): number {
    return this.subs.size;
  }

  get currentId(): number {
    return this.lastId;
  }

  publish(e: NewEvent): SandboxEvent {
    const { time, ...rest } = e;
    const event: SandboxEvent = { id: ++this.lastId, ...rest, timestamp: new Date(time ?? Date.now()).toISOString() };
    this.log?.append(event);
    this.published.set(event.event_type, (this.published.get(event.event_type) ?? 0) + 1);
    for (const [sub, filter] of this.subs) {
      if (!matchesEvent(filter, event)) continue;
      sub.push(event);
    }
    this.listeners.emit("event", event);
    return event;
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
