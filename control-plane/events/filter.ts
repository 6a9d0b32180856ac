import { EVENT_TYPES, type EventType, type SandboxEvent } from "./types.js";

/** Which events a subscriber wants: any of these sandboxes, any of these types (absent: all). */
export interface EventFilter {
  sandboxIds?: ReadonlySet<string>;
  types?: ReadonlySet<EventType>;
}

export class EventFilterError extends Error {}

/** Comma lists (or repeated values) as one list. */
export function listValues(values: string[]): string[] {
  return values
    .flatMap((v) => v.split(","))
    .map((v) => v.trim())
    .filter(Boolean);
}

/**
 * Event type patterns: exact names, `exec.*` (a prefix), `*` (everything).
 * An unknown name is an error that lists the known ones.
 */
export function parseEventTypes(patterns: string[]): Set<EventType> | undefined {
  if (patterns.length === 0 || patterns.includes("*")) return undefined;
  const out = new Set<EventType>();
  for (const p of patterns) {
    const matched = p.endsWith(".*") ? EVENT_TYPES.filter((t) => t.startsWith(p.slice(0, -1))) : EVENT_TYPES.filter((t) => t === p);
    if (matched.length === 0) {
      throw new EventFilterError(`unknown event type '${p}': use one of ${EVENT_TYPES.join(", ")}, a prefix such as exec.*, or *`);
    }
    for (const t of matched) out.add(t);
  }
  return out;
}

export function eventFilter(sandboxIds: string[], typePatterns: string[]): EventFilter {
  const types = parseEventTypes(typePatterns);
  return {
    ...(sandboxIds.length ? { sandboxIds: new Set(sandboxIds) } : {}),
    ...(types ? { types } : {}),
  };
}

export function matchesEvent(filter: EventFilter, e: Pick<SandboxEvent, "sandbox_id" | "event_type">): boolean {
  if (filter.sandboxIds && !filter.sandboxIds.has(e.sandbox_id)) return false;
  if (filter.types && !filter.types.has(e.event_type)) return false;
  return true;
}
