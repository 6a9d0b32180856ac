import type { IncomingMessage, ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import { apiKeyFromHeaders } from "../auth.js";
import { Router, type Route } from "../rest/router.js";
import { exportAudit } from "./audit.js";
import { capacity } from "./capacity.js";
import type { WsContext, WsHandler } from "./context.js";
import type { WorkspaceDeps } from "./deps.js";
import { sendWsError, wsErrorFrom, WsError } from "./errors.js";
import { listEvents, streamEvents } from "./events.js";
import { exec } from "./exec.js";
import { downloadFile, listFiles, readFile, uploadFile, writeFile } from "./files.js";
import { health } from "./health.js";
import { sandboxMetrics } from "./metrics.js";
import { listProcesses, signalProcess } from "./processes.js";
import { createSandbox, deleteSandbox, getSandbox, listSandboxes, pauseSandbox, resumeSandbox } from "./sandboxes.js";
import { killSession, listSessions, sessionInput, sessionResize, sessionOutput, sessionStatus, startSession, streamSession } from "./sessions.js";

/** Where the workspace API lives on the server's port: LOCALE2B_BASE_URL is the server's URL plus this. */
export const WORKSPACE_PREFIX = "/workspace";

const ROUTES: Route<WsHandler>[] = [
  { method: "GET", path: "/health", handler: health },
  { method: "POST", path: "/sandboxes", handler: createSandbox },
  { method: "GET", path: "/sandboxes", handler: listSandboxes },
  { method: "GET", path: "/sandboxes/:id", handler: getSandbox },
  { method: "DELETE", path: "/sandboxes/:id", handler: deleteSandbox },
  { method: "POST", path: "/sandboxes/:id/pause", handler: pauseSandbox },
  { method: "POST", path: "/sandboxes/:id/resume", handler: resumeSandbox },
  { method: "POST", path: "/sandboxes/:id/exec", handler: exec },
  { method: "GET", path: "/sandboxes/:id/exec", handler: listSessions },
  { method: "POST", path: "/sandboxes/:id/exec/start", handler: startSession },
  { method: "GET", path: "/sandboxes/:id/exec/:session/output", handler: sessionOutput },
  { method: "POST", path: "/sandboxes/:id/exec/:session/input", handler: sessionInput },
  { method: "POST", path: "/sandboxes/:id/exec/:session/resize", handler: sessionResize },
  { method: "GET", path: "/sandboxes/:id/exec/:session/status", handler: sessionStatus },
  { method: "GET", path: "/sandboxes/:id/exec/:session/stream", handler: streamSession },
  { method: "DELETE", path: "/sandboxes/:id/exec/:session", handler: killSession },
  { method: "POST", path: "/sandboxes/:id/files/write", handler: writeFile },
  { method: "GET", path: "/sandboxes/:id/files/read", handler: readFile },
  { method: "GET", path: "/sandboxes/:id/files/list", handler: listFiles },
  { method: "POST", path: "/sandboxes/:id/files/upload", handler: uploadFile },
  { method: "GET", path: "/sandboxes/:id/files/download", handler: downloadFile },
  { method: "GET", path: "/sandboxes/:id/metrics", handler: sandboxMetrics },
  { method: "GET", path: "/sandboxes/:id/processes", handler: listProcesses },
  { method: "POST", path: "/sandboxes/:id/processes/:pid/signal", handler: signalProcess },
  { method: "GET", path: "/capacity", handler: capacity },
  { method: "GET", path: "/events", handler: listEvents },
  { method: "GET", path: "/events/stream", handler: streamEvents },
  { method: "GET", path: "/audit", handler: exportAudit },
];

/** Routes that record nothing in the audit log (a health probe is not an operation). */
const UNAUDITED = new Set(["GET /health", "GET /capacity"]);

export interface WorkspaceApi {
  matches(req: IncomingMessage): boolean;
  handle(req: IncomingMessage, res: ServerResponse): void;
}

/**
 * locale2b's workspace API (../shared/workspace-contract.md) under
 * WORKSPACE_PREFIX: plain JSON over the same manager, envd process API and
 * keys as the E2B and Connect APIs. Every route but /health needs an API
 * key in X-API-Key; every request is audited (who, what, which sandbox,
 * result); errors are JSON that say what to do.
 */
export function createWorkspaceApi(deps: WorkspaceDeps): WorkspaceApi {
  const router = new Router<WsHandler>().add(...ROUTES);
  const log = deps.log.child({ component: "workspace-api" });

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const t0 = performance.now();
    const url = new URL(req.url ?? "/", "http://localhost");
    const path = url.pathname.slice(WORKSPACE_PREFIX.length) || "/";
    const method = req.method === "HEAD" ? "GET" : (req.method ?? "GET");
    const abort = new AbortController();
    res.once("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    const ctx: WsContext = { req, res, params: {}, query: url.searchParams, deps, key: undefined, signal: abort.signal, audit: {} };
    let action = `${method} ${path}`;
    let failure: WsError | undefined;
    try {
      const m = router.match(method, path);
      if (!m) throw new WsError(404, "not_found", `no route ${req.method} ${WORKSPACE_PREFIX}${path}: see docs/workspace-api.md for the routes`);
      if ("allowed" in m) {
        throw new WsError(405, "method_not_allowed", `method ${req.method} is not allowed on ${WORKSPACE_PREFIX}${path} (allowed: ${m.allowed.join(", ")})`, { allow: m.allowed.join(", ") });
      }
      action = `${method} ${m.path}`;
      ctx.params = m.params;
      if (action !== "GET /health") {
        ctx.key = await apiKeyFromHeaders(deps.store, req.headers);
        if (!ctx.key) throw new WsError(401, "unauthenticated", "missing or invalid API key: send it in the X-API-Key header (LOCALE2B_API_KEY); create one with 'locale2b keys create'");
      }
      await m.handler(ctx);
    } catch (err) {
      failure = wsErrorFrom(err);
      if (!failure) {
        log.error({ err, sandboxId: ctx.params.id, action }, "workspace request failed");
        failure = new WsError(500, "internal", `internal error: ${(err as Error)?.message ?? String(err)}`);
      } else if (failure.status >= 500) {
        log.warn({ sandboxId: ctx.params.id, action, status: failure.status, err: deps.redactor.redact(failure.message, ctx.params.id) }, "workspace request failed");
      }
      if (!abort.signal.aborted) sendWsError(res, failure);
    } finally {
      if (!UNAUDITED.has(action)) {
        const sandboxId = ctx.audit.sandboxId ?? ctx.params.id;
        const status = failure?.status ?? res.statusCode;
        deps.audit.record({
          actor: ctx.key?.id ?? "anonymous",
          api: "workspace",
          action,
          ...(sandboxId ? { sandbox_id: sandboxId } : {}),
          result: status < 400 ? "ok" : "error",
          status,
          ...(failure ? { message: failure.message } : {}),
          ...(ctx.audit.details ? { details: Object.fromEntries(Object.entries(ctx.audit.details).filter(([, v]) => v !== undefined)) } : {}),
          duration_ms: Math.round(performance.now() - t0),
        });
      }
    }
  };

  return {
    matches: (req) => {
      const url = req.url ?? "";
      return url === WORKSPACE_PREFIX || url.startsWith(`${WORKSPACE_PREFIX}/`) || url.startsWith(`${WORKSPACE_PREFIX}?`);
    },
    handle: (req, res) => void handle(req, res),
  };
}
