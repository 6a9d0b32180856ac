import type { EventLog } from "./event-log.js";
import type { EventFilter } from "./filter.js";
import type { Subscription } from "./subscription.js";

/**
 * What an event stream reads from: a live queue of new events and the log
 * to replay from. One box: its EventBus. A server on Postgres: a feed that
 * reads the fleet's event log as it grows (EventFeed), so a stream carries
 * every host's events with their fleet-wide ids.
 */
export interface EventSource {
  readonly log?: EventLog | undefined;
  /** A queue of the matching events after currentId(); close() it when done. */
  subscribe(filter: EventFilter, limit?: number): Subscription;
  /** The id after which a subscription made before this call gets every event. */
  currentId(): Promise<number>;
  /** Cut-off accounting for transports: call when a subscription overflowed. */
  noteOverflow(): void;
}
