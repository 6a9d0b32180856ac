import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import type { AuditLog } from "../../audit/audit-log.js";
import type { Store } from "../../store/store.js";
import { readJsonObject, Fields } from "../rest/body.js";
import { DashboardAssets, defaultAssetsDir, SECURITY_HEADERS } from "./assets.js";
import { overTls, readCookie, SESSION_COOKIE, sessionCookie } from "./cookies.js";
import { API_PREFIX, forward, type GatewayTargets } from "./gateway.js";
import { KEYS_PATH, keysCall } from "./keys.js";
import { isSafeMethod, sameOrigin } from "./origin.js";
import { csrfMatches, DashboardSessions, type DashboardSession, type SessionLimits } from "./sessions.js";
import { SignInLimiter, type SignInLimits } from "./sign-in-limit.js";

/** Where the dashboard lives on the server's port. */
export const DASHBOARD_PREFIX = "/dashboard";

export interface DashboardDeps extends GatewayTargets {
  store: Store;
  audit?: AuditLog;
  log: Logger;
  /** The built page (default: dist/dashboard, scripts/build-dashboard.mjs). */
  assetsDir?: string;
  sessionLimits?: SessionLimits;
  /** Wrong keys allowed per client address before sign-in answers 429 (default: 10 a minute). */
  signInLimits?: SignInLimits;
}

export interface Dashboard {
  matches(req: IncomingMessage): boolean;
  handle(req: IncomingMessage, res: ServerResponse): void;
  /** Signed-in browsers, for tests and metrics. */
  readonly sessions: DashboardSessions;
  close(): void;
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res
    .writeHead(status, { "content-type": "application/json", "cache-control": "no-store", ...SECURITY_HEADERS, ...headers })
    .end(JSON.stringify(body));
}

function refuse(res: ServerResponse, status: number, error: string, message: string): void {
  sendJson(res, status, { error, message, status });
}

const NOT_SIGNED_IN = "not signed in to the dashboard: POST /dashboard/session with {\"api_key\": \"e2b_…\"} (the page's sign-in form does), then send the cookie it sets";

/**
 * The web dashboard (docs/dashboard.md): the built page, a cookie session
 * made from an API key, and a gateway through which the page calls the
 * E2B REST and workspace APIs as that key. The key stays on the server;
 * the browser holds an HttpOnly, SameSite=Strict cookie with a random id.
 * Every API call needs the cookie; one that changes something also needs
 * the session's CSRF token (X-CSRF-Token) and must not come from another
 * site (Origin, Sec-Fetch-Site).
 */
export function createDashboard(deps: DashboardDeps): Dashboard {
  const log = deps.log.child({ component: "dashboard" });
  const assets = new DashboardAssets(deps.assetsDir ?? defaultAssetsDir());
  if (!assets.built) log.warn({ dir: assets.dir }, "dashboard: the page is not built (npm run build makes it): /dashboard answers 503");
  const sessions = new DashboardSessions(deps.sessionLimits);
  const signInLimiter = new SignInLimiter(deps.signInLimits);

  const current = (req: IncomingMessage): { id: string; session: DashboardSession } | undefined => {
    const id = readCookie(req, SESSION_COOKIE);
    const session = sessions.get(id);
    return session && id ? { id, session } : undefined;
  };

  const audit = (req: IncomingMessage, actor: string, action: string, status: number, message?: string) =>
    deps.audit?.record({ actor, api: "dashboard", action, result: status < 400 ? "ok" : "error", status, ...(message ? { message } : {}), details: { user_agent: String(req.headers["user-agent"] ?? "").slice(0, 200) } });

  const sessionInfo = (s: DashboardSession) => ({ key_id: s.keyId, csrf_token: s.csrf, expires_at: new Date(sessions.expiresAt(s)).toISOString() });

  /** POST /dashboard/session {api_key}: signs in. */
  const signIn = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const origin = sameOrigin(req);
    if (!origin.ok) {
      log.warn({ why: origin.why }, "dashboard: cross-site sign-in refused");
      audit(req, "anonymous", "POST /dashboard/session", 403, origin.why);
      return refuse(res, 403, "cross_site", `refused: ${origin.why}; sign in from the dashboard's own page`);
    }
    if (!String(req.headers["content-type"] ?? "").startsWith("application/json")) {
      return refuse(res, 415, "invalid_request", "send the key as JSON: {\"api_key\": \"e2b_…\"} with content-type application/json");
    }
    // Per client address (the TCP peer: behind a reverse proxy, that proxy's).
    const address = req.socket.remoteAddress ?? "unknown";
    const wait = signInLimiter.retryAfterSeconds(address);
    if (wait > 0) {
      log.warn({ address, retryAfter: wait }, "dashboard: sign-in refused: too many wrong keys from this address");
      audit(req, "anonymous", "POST /dashboard/session", 429, "too many wrong keys");
      return sendJson(res, 429, { error: "rate_limited", message: `too many wrong API keys from this address: try again in ${wait} s`, status: 429 }, { "retry-after": String(wait) });
    }
    let key: string | undefined;
    try {
      key = new Fields(await readJsonObject(req)).string("api_key")?.trim();
    } catch (err) {
      return refuse(res, 400, "invalid_request", (err as Error).message);
    }
    const info = key ? await deps.store.verifyApiKey(key) : undefined;
    if (!key || !info) {
      signInLimiter.failed(address);
      audit(req, "anonymous", "POST /dashboard/session", 401, "invalid API key");
      return refuse(res, 401, "unauthenticated", "that is not a valid API key of this server: use the E2B_API_KEY 'serve' printed, or make one with 'locale2b keys create'");
    }
    signInLimiter.succeeded(address);
    const { id, session } = sessions.create(key, info.id);
    log.info({ keyId: info.id }, "dashboard: signed in");
    audit(req, info.id, "POST /dashboard/session", 200);
    sendJson(res, 200, sessionInfo(session), { "set-cookie": sessionCookie(id, (sessions.expiresAt(session) - Date.now()) / 1000, overTls(req)) });
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://localhost");
    const path = url.pathname;
    const method = req.method ?? "GET";

    if (path.startsWith(`${DASHBOARD_PREFIX}/assets/`)) {
      if (!isSafeMethod(method)) return refuse(res, 405, "method_not_allowed", "assets are read with GET");
      const name = path.slice(`${DASHBOARD_PREFIX}/assets/`.length);
      return assets.send(req, res, /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name) && name !== "index.html" ? name : "");
    }

    if (path === `${DASHBOARD_PREFIX}/session`) {
      if (method === "POST") return signIn(req, res);
      const cur = current(req);
      if (method === "GET") {
        // The key may have been revoked since sign-in: then the session ends too.
        if (cur && !(await deps.store.verifyApiKey(cur.session.key))) sessions.delete(cur.id);
        else if (cur) return sendJson(res, 200, sessionInfo(cur.session));
        return refuse(res, 401, "unauthenticated", NOT_SIGNED_IN);
      }
      if (method === "DELETE") {
        if (!cur) return refuse(res, 401, "unauthenticated", NOT_SIGNED_IN);
        const origin = sameOrigin(req);
        if (!origin.ok || !csrfMatches(cur.session, req.headers["x-csrf-token"])) {
          const why = origin.ok ? "missing or wrong X-CSRF-Token" : origin.why;
          audit(req, cur.session.keyId, "DELETE /dashboard/session", 403, why);
          return refuse(res, 403, "csrf", `refused: ${why}`);
        }
        sessions.delete(cur.id);
        log.info({ keyId: cur.session.keyId }, "dashboard: signed out");
        audit(req, cur.session.keyId, "DELETE /dashboard/session", 200);
        return sendJson(res, 200, { signed_out: true }, { "set-cookie": sessionCookie("", 0, overTls(req)) });
      }
      return refuse(res, 405, "method_not_allowed", "use GET, POST or DELETE on /dashboard/session");
    }

    if (path === API_PREFIX || path.startsWith(`${API_PREFIX}/`)) {
      const cur = current(req);
      if (!cur) return refuse(res, 401, "unauthenticated", NOT_SIGNED_IN);
      const origin = sameOrigin(req);
      if (!origin.ok) {
        log.warn({ keyId: cur.session.keyId, method, path, why: origin.why }, "dashboard: cross-site call refused");
        audit(req, cur.session.keyId, `${method} ${path}`, 403, origin.why);
        return refuse(res, 403, "cross_site", `refused: ${origin.why}`);
      }
      if (!isSafeMethod(method) && !csrfMatches(cur.session, req.headers["x-csrf-token"])) {
        log.warn({ keyId: cur.session.keyId, method, path }, "dashboard: call without its CSRF token refused");
        audit(req, cur.session.keyId, `${method} ${path}`, 403, "missing or wrong X-CSRF-Token");
        return refuse(res, 403, "csrf", "refused: a call that changes something needs the session's X-CSRF-Token header (GET /dashboard/session gives it)");
      }
      if (path === KEYS_PATH || path.startsWith(`${KEYS_PATH}/`)) {
        // The keys are the server's own: a session whose key was revoked meanwhile manages none.
        if (!(await deps.store.verifyApiKey(cur.session.key))) {
          sessions.delete(cur.id);
          return refuse(res, 401, "unauthenticated", NOT_SIGNED_IN);
        }
        const answer = await keysCall(deps.store, req, path.slice(KEYS_PATH.length), cur.session.keyId);
        if (!isSafeMethod(method)) {
          if (answer.status < 400) log.info({ keyId: cur.session.keyId, method, target: answer.target }, "dashboard: API key changed");
          audit(req, cur.session.keyId, `${method} ${KEYS_PATH}${path === KEYS_PATH ? "" : "/:id"}`, answer.status, answer.status >= 400 ? (answer.body as { message: string }).message : answer.target);
        }
        return sendJson(res, answer.status, answer.body);
      }
      if (!forward(deps, req, res, path.slice(API_PREFIX.length), url.search, cur.session.key)) {
        return refuse(res, 404, "not_found", `no dashboard API ${path}: the page calls ${API_PREFIX}/e2b/… (E2B REST) and ${API_PREFIX}/workspace/… (workspace API)`);
      }
      return;
    }

    // The page itself: its sign-in form for anyone, its other routes (/dashboard/sandboxes/<id>) for a session only.
    if (!isSafeMethod(method)) return refuse(res, 405, "method_not_allowed", `${method} is not allowed on ${path}`);
    if (!assets.built) {
      res.writeHead(503, { "content-type": "text/plain; charset=utf-8", ...SECURITY_HEADERS }).end("the dashboard is not built: run 'npm run build' (scripts/build-dashboard.mjs)\n");
      return;
    }
    if (path === DASHBOARD_PREFIX || path === `${DASHBOARD_PREFIX}/`) return assets.send(req, res, "index.html");
    if (!current(req)) {
      res.writeHead(303, { location: `${DASHBOARD_PREFIX}/?next=${encodeURIComponent(path)}`, "cache-control": "no-store", ...SECURITY_HEADERS }).end();
      return;
    }
    assets.send(req, res, "index.html");
  };

  return {
    matches: (req) => {
      const u = req.url ?? "";
      return u === DASHBOARD_PREFIX || u.startsWith(`${DASHBOARD_PREFIX}/`) || u.startsWith(`${DASHBOARD_PREFIX}?`);
    },
    handle: (req, res) =>
      void handle(req, res).catch((err: unknown) => {
        log.error({ err }, "dashboard request failed");
        if (!res.headersSent) refuse(res, 500, "internal", `internal error: ${(err as Error)?.message ?? String(err)}`);
        else res.destroy();
      }),
    sessions,
    close: () => sessions.close(),
  };
}
