import type { IncomingMessage, ServerResponse } from "node:http";
import { WORKSPACE_PREFIX } from "../workspace/router.js";

/** Where the page reaches the server's existing APIs: /dashboard/api/e2b/<E2B REST path>, /dashboard/api/workspace/<workspace path>. */
export const API_PREFIX = "/dashboard/api";

export interface GatewayTargets {
  /** E2B's REST API (the handler server.ts hands non-Connect requests to). */
  rest: (req: IncomingMessage, res: ServerResponse) => unknown;
  /** The workspace API (events, SSE, metrics history, sessions). */
  workspace: (req: IncomingMessage, res: ServerResponse) => unknown;
}

/** Added to every answer the gateway forwards (the handler's own headers come on top). */
const API_RESPONSE_HEADERS: Record<string, string> = {
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'; sandbox",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-resource-policy": "same-origin",
};

/** Headers a browser may send that must not reach the APIs: other credentials, routing to a sandbox's envd. */
const DROPPED = ["cookie", "authorization", "x-api-key", "e2b-sandbox-id", "e2b-sandbox-port", "x-access-token"];

/**
 * Sends a signed-in page's call to the API it names, as a call made with
 * the session's API key: the same handlers, checks, errors and audit
 * entries (under the key's id) as a client of that API gets. `path` is the
 * normalised path below API_PREFIX; false when it names no API.
 */
export function forward(targets: GatewayTargets, req: IncomingMessage, res: ServerResponse, path: string, search: string, key: string): boolean {
  const m = /^\/(e2b|workspace)(\/.*)?$/.exec(path);
  if (!m) return false;
  const rest = m[2] ?? "/";
  for (const h of DROPPED) delete req.headers[h];
  // What the APIs answer is data, never a page of this origin: a downloaded file a browser would
  // otherwise sniff as HTML cannot run script here.
  for (const [name, value] of Object.entries(API_RESPONSE_HEADERS)) res.setHeader(name, value);
  req.headers["x-api-key"] = key;
  if (m[1] === "e2b") {
    req.url = `${rest}${search}`;
    void targets.rest(req, res);
  } else {
    req.url = `${WORKSPACE_PREFIX}${rest === "/" ? "" : rest}${search}`;
    void targets.workspace(req, res);
  }
  return true;
}
