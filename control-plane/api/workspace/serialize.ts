import type { SandboxRecord } from "../../domain/sandbox.js";
import { WORKSPACE_DIR } from "../../workspace/workspace-dir.js";
import { WORKSPACE_METADATA } from "../../workspace/metadata.js";
import { templateNameOf } from "../../workspace/workspaces.js";

export type WorkspaceStatus = "running" | "paused" | "stopped";

/** The contract's three states: a sandbox being created or resumed counts as running, one being paused as paused. */
export function statusOf(rec: SandboxRecord): WorkspaceStatus {
  if (rec.state === "killed") return "stopped";
  return rec.state === "pausing" || rec.state === "paused" ? "paused" : "running";
}

/** SandboxInfo: the contract's fields, then a few extra ones. */
export function sandboxInfo(rec: SandboxRecord): Record<string, unknown> {
  return {
    sandbox_id: rec.id,
    status: statusOf(rec),
    template: templateNameOf(rec),
    memory_mb: rec.memoryMB,
    vcpu_count: rec.cpuCount,
    workspace_id: rec.metadata[WORKSPACE_METADATA] ?? null,
    created_at: new Date(rec.startedAt).toISOString(),
    // Sandboxes on the process runtime share the host's network: none of their own.
    ip_address: null,
    workspace_dir: WORKSPACE_DIR,
    /** When the sandbox pauses (workspace sandboxes) or ends (others) unless used again. */
    timeout_at: new Date(rec.endAt).toISOString(),
    /** Beyond the contract: the template as E2B names it (`base` where `template` says `default`), the runtime it runs on, and its exact state (creating, running, pausing, paused, resuming). */
    template_id: rec.templateId,
    runtime: rec.runtime,
    state: rec.state,
  };
}
