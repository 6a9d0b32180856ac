import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerResponse } from "node:http";

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1) are not forwarded, nor `expect`
 * (the server already answered `100 Continue`) or HTTP/2 pseudo-headers.
 */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "expect",
  "http2-settings",
]);

function copyHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  const connection = headers.connection;
  const listed =
    typeof connection === "string" && connection.includes(",")
      ? new Set(connection.split(",").map((s) => s.trim().toLowerCase()))
      : typeof connection === "string" && !/^(keep-alive|close)$/i.test(connection)
        ? new Set([connection.trim().toLowerCase()])
        : undefined;
  for (const key in headers) {
    if (HOP_BY_HOP.has(key) || key.charCodeAt(0) === 58 /* ':' */ || listed?.has(key)) continue;
    const v = headers[key];
    if (v !== undefined) out[key] = v;
  }
  return out;
}

/** Request headers for envd over HTTP/2 (lower case there by definition): everything end-to-end (incl. Connect-Timeout-Ms, Keepalive-Ping-Interval, Authorization, X-Access-Token). */
export function forwardHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  return copyHeaders(headers);
}

/** Response headers for an HTTP/2 client: envd's, minus hop-by-hop ones (framing is redone on this hop). */
export function responseHeaders(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  return copyHeaders(headers);
}

/**
 * HTTP/1.1 headers as the sender wrote them (`rawHeaders`: name, value, name,
 * value…), minus hop-by-hop ones: names keep their case and repeated headers
 * their order, so the next hop sees what the client (or the server) wrote.
 */
export function endToEndRawHeaders(raw: string[]): string[] {
  const listed = new Set<string>();
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() !== "connection") continue;
    for (const token of raw[i + 1]!.split(",")) listed.add(token.trim().toLowerCase());
  }
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (HOP_BY_HOP.has(name) || name.charCodeAt(0) === 58 /* ':' */ || listed.has(name)) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/** Whether a raw header list has `name` (lower case). */
export function hasRawHeader(raw: string[], name: string): boolean {
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) return true;
  return false;
}

/** Connect RPC paths (`/process.Process/Start`, `/filesystem.Filesystem/Stat`, …). */
export function isConnectPath(url: string | undefined): boolean {
  return url !== undefined && /^\/[\w.]+\.[A-Z]\w*\/[A-Z]/.test(url);
}

const CONNECT_CODE: Record<number, string> = { 401: "unauthenticated", 403: "permission_denied", 502: "unavailable", 503: "unavailable" };

/**
 * The JSON of a proxy-side error. With `sandboxId` it has E2B's proxy shape
 * (`{"sandboxId":…,"message":…,"code":…}`, as its "sandbox not found" answer).
 */
export function proxyErrorBody(code: number | string, message: string, sandboxId?: string): string {
  return JSON.stringify(sandboxId === undefined ? { code, message } : { sandboxId, message, code });
}

/** E2B's proxy answer for a sandbox it does not know (or no longer runs), word for word; sent with the sandbox's id. */
export const SANDBOX_NOT_FOUND = "The sandbox was not found";

/**
 * A proxy-side error as JSON. For Connect paths the body is a Connect error
 * (`{"code":"unavailable","message":…}`): the JS client keeps the message
 * (unary) and Python's Connect client needs the string code; for the HTTP
 * endpoints (/files, /health) it is envd's `{"code":<status>,"message":…}`.
 * The HTTP status is the same either way, and the SDKs map it the same way.
 */
export function sendProxyError(res: ServerResponse, status: number, message: string, connect: boolean, sandboxId?: string): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const body = Buffer.from(proxyErrorBody(connect ? (CONNECT_CODE[status] ?? "unknown") : status, message, sandboxId));
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": String(body.length),
    "access-control-allow-origin": "*",
    "cache-control": "no-store",
  });
  res.end(body);
}
