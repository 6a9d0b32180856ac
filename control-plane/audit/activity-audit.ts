import type { EventBus } from "../events/bus.js";
import type { SandboxEvent } from "../events/types.js";
import type { LifecycleBus } from "../manager/events.js";
import type { AuditLog } from "./audit-log.js";
import type { AuditClaims } from "./claims.js";

/**
 * What the audit log learns without an API request of its own: activity in
 * sandboxes that envd reported (commands and file transfers by whoever holds
 * the sandbox's token, e.g. an E2B SDK through the proxy) and what the
 * system did (timeouts, sandboxes that died). Operations the workspace API
 * made itself are audited by its router instead: a blocking exec's events
 * carry its exec_id, and its file transfers are claimed. A background
 * session's commands are audited here, attributed to the key that started it.
 */
export function auditActivity(o: {
  audit: AuditLog;
  claims: AuditClaims;
  bus: EventBus;
  lifecycle: LifecycleBus;
  /** The key that started a workspace session, for its exec events. */
  sessionActor: (sandboxId: string, sessionId: string) => string | undefined;
}): () => void {
  const offEvents = o.bus.on((e: SandboxEvent) => {
    if (!e.event_type.startsWith("exec.") && !e.event_type.startsWith("file.")) return;
    if (e.event_type.startsWith("file.") && e.path !== undefined && o.claims.take(e.sandbox_id, e.event_type, e.path)) return;
    // A blocking workspace exec is one request, audited by the workspace router.
    if (e.exec_id) return;
    const actor = (e.session_id && o.sessionActor(e.sandbox_id, e.session_id)) || "envd-token";
    const failed = e.event_type === "exec.failed";
    o.audit.record({
      actor,
      api: e.session_id ? "workspace" : "envd",
      action: e.event_type,
      sandbox_id: e.sandbox_id,
      result: failed ? "error" : "ok",
      ...(failed && e.error ? { message: e.error } : {}),
      details: Object.fromEntries(
        Object.entries({
          event_id: e.id,
          session_id: e.session_id,
          command: e.command,
          pid: e.pid,
          cwd: e.cwd,
          user: e.user,
          exit_code: e.exit_code,
          path: e.path,
          bytes: e.bytes,
        }).filter(([, v]) => v !== undefined),
      ),
      ...(e.duration_ms !== undefined ? { duration_ms: e.duration_ms } : {}),
    });
  });
  const offLifecycle = o.lifecycle.subscribe({}, (e) => {
    if (e.type === "timed_out") {
      o.audit.record({ actor: "system", api: "system", action: "sandbox.timeout", sandbox_id: e.sandbox.id, result: "ok", details: { on_timeout: e.sandbox.onTimeout } });
    } else if (e.type === "killed" && e.sandbox.endReason?.startsWith("died")) {
      o.audit.record({ actor: "system", api: "system", action: "sandbox.died", sandbox_id: e.sandbox.id, result: "error", message: e.sandbox.endReason });
    }
  });
  return () => {
    offEvents();
    offLifecycle();
  };
}
