import type { IncomingMessage, ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import { apiKeyFromHeaders, MISSING_KEY_MESSAGE } from "../auth.js";
import type { ApiDeps } from "../deps.js";
import { sendError, sendFailure } from "./errors.js";
import { lifecycleRoutes } from "./lifecycle.js";
import { logRoutes } from "./logs.js";
import { metricRoutes } from "./metrics.js";
import { sandboxByIdRoutes, sandboxRoutes } from "./sandboxes.js";
import { secretRoutes } from "./secrets.js";
import { snapshotRoutes } from "./snapshots.js";
import { templateRoutes } from "./templates.js";
import { volumeContentRoutes } from "./volume-content.js";
import { volumeRoutes } from "./volumes.js";

/** What a route handler gets: the exchange, its path parameters and query, and the API's dependencies. */
export interface RestContext {
  req: IncomingMessage;
  res: ServerResponse;
  params: Record<string, string>;
  query: URLSearchParams;
  deps: ApiDeps;
  /** What the request's audit entry records beside the route (a create names its new sandbox here; safe facts in details). */
  note?: AuditNote;
}

export interface AuditNote {
  sandboxId?: string;
  /** Ids, names, versions: never a key, a token or a secret's value. */
  details?: Record<string, unknown>;
}

export type Handler = (ctx: RestContext) => Promise<void>;

export interface Route<H = Handler> {
  method: string;
  /** `/sandboxes/:sandboxID/pause`: `:name` segments are parameters. */
  path: string;
  handler: H;
  /** The request authenticates itself (a signed URL, a volume's token: the handler checks), not with an API key. */
  signed?: boolean;
}

interface Compiled<H> extends Route<H> {
  segments: string[];
}

type Match<H> = { handler: H; params: Record<string, string>; path: string; signed?: boolean } | { allowed: string[] } | undefined;

/**
 * A small method + path matcher. Routes are tried in order, so literal
 * paths (`/sandboxes/metrics`) must come before parameterised ones
 * (`/sandboxes/:sandboxID`). A path that exists under other methods yields
 * those methods (→ 405).
 */
export class Router<H = Handler> {
  private readonly routes: Compiled<H>[] = [];

  add(...routes: Route<H>[]): this {
    for (const r of routes) this.routes.push({ ...r, segments: r.path.split("/").slice(1) });
    return this;
  }

  match(method: string, pathname: string): Match<H> {
    const parts = (pathname.length > 1 && pathname.endsWith("/") ? pathname.slice(0, -1) : pathname).split("/").slice(1);
    const allowed = new Set<string>();
    for (const r of this.routes) {
      const params = matchSegments(r.segments, parts);
      if (!params) continue;
      if (r.method === method) return { handler: r.handler, params, path: r.path, ...(r.signed ? { signed: true } : {}) };
      allowed.add(r.method);
    }
    return allowed.size ? { allowed: [...allowed] } : undefined;
  }
}

function matchSegments(segments: string[], parts: string[]): Record<string, string> | undefined {
  if (segments.length !== parts.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    const part = parts[i]!;
    if (seg.startsWith(":")) {
      if (part === "") return undefined;
      try {
        params[seg.slice(1)] = decodeURIComponent(part);
      } catch {
        return undefined;
      }
    } else if (seg !== part) {
      return undefined;
    }
  }
  return params;
}

/**
 * One audit entry per E2B REST request: the key, the route, the sandbox (a
 * create's comes from its answer) and the status; failures with the error
 * message E2B's `{code, message}` body carried.
 */
function auditRequest(deps: ApiDeps, res: ServerResponse, a: Audited, t0: number): void {
  if (!deps.audit) return;
  const status = res.statusCode;
  const sandboxId = a.sandboxId ?? a.note.sandboxId;
  deps.audit.record({
    actor: a.actor,
    api: "e2b",
    action: a.action,
    ...(sandboxId ? { sandbox_id: sandboxId } : {}),
    result: status < 400 ? "ok" : "error",
    status,
    ...(a.error && status >= 400 ? { message: a.error } : {}),
    ...(a.note.details ? { details: a.note.details } : {}),
    duration_ms: Math.round(performance.now() - t0),
  });
}

interface Audited {
  action: string;
  actor: string;
  sandboxId?: string;
  note: AuditNote;
  error?: string;
}

/**
 * The E2B control-plane REST API (the part the SDKs and CLI use). Unknown
 * paths are 404 and known paths under another method 405, both as JSON;
 * every route needs a valid API key (`X-API-KEY`), else 401, but the signed
 * upload of a template's files (its URL carries its own authentication).
 */
export function createRestApi(deps: ApiDeps): (req: IncomingMessage, res: ServerResponse) => Promise<void> {
  const router = new Router().add(
    ...sandboxRoutes,
    ...metricRoutes, // has the literal /sandboxes/metrics, so before /sandboxes/:sandboxID
    ...sandboxByIdRoutes,
    ...lifecycleRoutes,
    ...logRoutes,
    ...snapshotRoutes,
    ...templateRoutes,
    ...volumeRoutes,
    ...volumeContentRoutes,
    ...secretRoutes,
  );
  return async (req, res) => {
    const t0 = performance.now();
    let audited: Audited | undefined;
    try {
      const url = new URL(req.url ?? "/", "http://localhost");
      const method = req.method === "HEAD" ? "GET" : (req.method ?? "GET");
      const m = router.match(method, url.pathname);
      if (!m) return sendError(res, 404, `no route for ${req.method} ${url.pathname}`);
      if ("allowed" in m) {
        return sendError(res, 405, `method ${req.method} is not allowed on ${url.pathname} (allowed: ${m.allowed.join(", ")})`, {
          allow: m.allowed.join(", "),
        });
      }
      const key = await apiKeyFromHeaders(deps.store, req.headers);
      audited = { action: `${method} ${m.path}`, actor: key?.id ?? (m.signed ? (m.params.volumeID ? "volume-token" : "signed-url") : "anonymous"), ...(m.params.sandboxID ? { sandboxId: m.params.sandboxID } : {}), note: {} };
      if (!key && !m.signed) return sendError(res, 401, MISSING_KEY_MESSAGE);
      await m.handler({ req, res, params: m.params, query: url.searchParams, deps, note: audited.note });
    } catch (err) {
      if (audited) audited.error = (err as Error)?.message;
      sendFailure(res, err, deps.log);
    } finally {
      if (audited) auditRequest(deps, res, audited, t0);
    }
  };
}
