import { WORKSPACE_METADATA } from "../workspace/metadata.js";
import type { LifecycleEvent } from "../domain/sandbox.js";
import type { NewEvent } from "./types.js";

/** The manager's lifecycle events as sandbox.* events (timed_out is followed by the pause or kill it causes). */
export function lifecycleToEvent(e: LifecycleEvent): NewEvent | undefined {
  const s = e.sandbox;
  const workspaceId = s.metadata[WORKSPACE_METADATA];
  const base = { sandbox_id: s.id, time: e.time, ...(workspaceId ? { workspace_id: workspaceId } : {}) };
  switch (e.type) {
    case "created":
      return { ...base, event_type: "sandbox.created", template: s.templateId };
    case "paused":
      return { ...base, event_type: "sandbox.paused" };
    case "resumed":
      return { ...base, event_type: "sandbox.resumed" };
    case "killed":
      return { ...base, event_type: "sandbox.destroyed", ...(s.endReason ? { reason: s.endReason } : {}) };
    default:
      return undefined;
  }
}
