import { Code, ConnectError } from "@connectrpc/connect";
import type { ServerResponse } from "node:http";
import { ControlPlaneError } from "../../domain/errors.js";
import { HttpError } from "../rest/errors.js";

/**
 * A workspace API failure: its HTTP status, a stable code and a message
 * that says what to do. Answered as
 * `{"error": code, "message": …, "detail": …, "status": n}` (`detail` is
 * the same message, where FastAPI-style clients look for it).
 */
export class WsError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "WsError";
  }
}

const KINDS: Record<ControlPlaneError["kind"], [number, string]> = {
  not_found: [404, "not_found"],
  conflict: [409, "conflict"],
  invalid: [400, "invalid_request"],
  capacity: [429, "capacity"],
  unavailable: [503, "unavailable"],
  unauthenticated: [401, "unauthenticated"],
  internal: [500, "internal"],
};

const HTTP_CODES: Record<number, string> = {
  400: "invalid_request",
  401: "unauthenticated",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  409: "conflict",
  413: "too_large",
  429: "capacity",
  500: "internal",
  502: "sandbox_error",
  503: "unavailable",
  504: "timeout",
  507: "no_space",
};

/** envd's Connect codes → what the workspace API answers. */
const CONNECT: Partial<Record<Code, [number, string]>> = {
  [Code.NotFound]: [404, "not_found"],
  [Code.InvalidArgument]: [400, "invalid_request"],
  [Code.AlreadyExists]: [409, "conflict"],
  [Code.FailedPrecondition]: [409, "conflict"],
  [Code.PermissionDenied]: [403, "forbidden"],
  [Code.ResourceExhausted]: [507, "no_space"],
  [Code.DeadlineExceeded]: [504, "timeout"],
  [Code.Unavailable]: [503, "unavailable"],
};

export function wsErrorFrom(err: unknown): WsError | undefined {
  if (err instanceof WsError) return err;
  if (err instanceof HttpError) return new WsError(err.status, HTTP_CODES[err.status] ?? "error", err.message, err.headers);
  if (err instanceof ControlPlaneError) {
    const [status, code] = KINDS[err.kind];
    const headers: Record<string, string> = status === 429 ? { "retry-after": String(Math.max(1, Math.ceil(err.retryAfterSeconds ?? 1))) } : {};
    return new WsError(status, code, err.message, headers);
  }
  if (err instanceof ConnectError) {
    const [status, code] = CONNECT[err.code] ?? [502, "sandbox_error"];
    return new WsError(status, code, `the sandbox answered: ${err.rawMessage}`);
  }
  return undefined;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const payload = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { ...headers, "content-type": "application/json; charset=utf-8", "content-length": String(payload.length), "cache-control": "no-store" });
  res.end(payload);
}

export function sendWsError(res: ServerResponse, e: WsError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, e.status, { error: e.code, message: e.message, detail: e.message, status: e.status }, e.headers);
}
