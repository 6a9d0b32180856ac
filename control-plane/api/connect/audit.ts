import { Code, ConnectError, createContextKey, type Interceptor } from "@connectrpc/connect";
import type { ApiKeyInfo } from "../../store/store.js";
import { performance } from "node:perf_hooks";
import { apiKeyFromHeaders } from "../auth.js";
import type { ApiDeps } from "../deps.js";

/** The caller's key as the audit interceptor found it (null: none valid), so the auth interceptor need not look it up again. */
export const CALLER_KEY = createContextKey<ApiKeyInfo | null | undefined>(undefined, { description: "caller's API key" });

/**
 * One audit entry per Connect API call: the key, the method, the sandbox
 * (the request's sandbox_id, or a create's new one) and the outcome (a
 * Connect code). A stream (WatchSandboxEvents) is recorded when it opens.
 * Outermost, so calls refused for a missing key are recorded too.
 */
export function auditInterceptor(deps: Pick<ApiDeps, "store" | "audit">): Interceptor {
  return (next) => async (req) => {
    if (!deps.audit) return next(req);
    const t0 = performance.now();
    const key = await apiKeyFromHeaders(deps.store, req.header);
    req.contextValues.set(CALLER_KEY, key ?? null);
    const actor = key?.id ?? "anonymous";
    const action = `${req.service.typeName}/${req.method.name}`;
    const asked = !req.stream ? (req.message as { sandboxId?: unknown }).sandboxId : undefined;
    const record = (result: "ok" | "error", sandboxId: unknown, message?: string, code?: string) =>
      deps.audit!.record({
        actor,
        api: "connect",
        action,
        ...(typeof sandboxId === "string" && sandboxId ? { sandbox_id: sandboxId } : {}),
        result,
        ...(message ? { message } : {}),
        ...(code ? { details: { code } } : {}),
        duration_ms: Math.round(performance.now() - t0),
      });
    try {
      const res = await next(req);
      const created = !res.stream ? (res.message as { sandbox?: { sandboxId?: unknown } }).sandbox?.sandboxId : undefined;
      record("ok", asked || created);
      return res;
    } catch (err) {
      const ce = ConnectError.from(err);
      record("error", asked, ce.rawMessage, Code[ce.code]);
      throw err;
    }
  };
}
