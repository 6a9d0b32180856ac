import type { ServerResponse } from "node:http";
import type { Logger } from "pino";
import { ControlPlaneError } from "../../domain/errors.js";

/**
 * A request failure with its HTTP status, answered as E2B's `Error` schema:
 * `{"code": <status>, "message": "…"}`. The JS SDK branches on the body's
 * `code` (e.g. `kill()` returns false only when it reads `code: 404`), so the
 * body code always equals the HTTP status.
 */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "HttpError";
  }
}

const STATUS: Record<ControlPlaneError["kind"], number> = {
  not_found: 404,
  conflict: 409,
  invalid: 400,
  capacity: 429,
  // REST callers get "try again later" (the JS SDK maps 503 to ServiceBusyError);
  // the envd proxy answers 502 itself, which the SDKs read as "sandbox not running".
  unavailable: 503,
  unauthenticated: 401,
  internal: 500,
};

/** The HTTP status and extra headers for a manager error (429 carries Retry-After in whole seconds). */
export function httpErrorFrom(err: ControlPlaneError): HttpError {
  const status = STATUS[err.kind];
  const headers: Record<string, string> = {};
  if (status === 429) headers["retry-after"] = String(Math.max(1, Math.ceil(err.retryAfterSeconds ?? 1)));
  return new HttpError(status, err.message, headers);
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const payload = Buffer.from(JSON.stringify(body));
  res.writeHead(status, {
    ...headers,
    "content-type": "application/json; charset=utf-8",
    "content-length": String(payload.length),
  });
  res.end(payload);
}

export function sendNoContent(res: ServerResponse): void {
  res.writeHead(204).end();
}

export function sendError(res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}): void {
  sendJson(res, status, { code: status, message }, headers);
}

/** Answers any thrown value: HttpError and ControlPlaneError keep their status, anything else is a logged 500. */
export function sendFailure(res: ServerResponse, err: unknown, log: Logger): void {
  const http = err instanceof HttpError ? err : err instanceof ControlPlaneError ? httpErrorFrom(err) : undefined;
  if (!http) log.error({ err }, "REST request failed");
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (http) sendError(res, http.status, http.message, http.headers);
  else sendError(res, 500, `internal error: ${(err as Error)?.message ?? String(err)}`);
}
