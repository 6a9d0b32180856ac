import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { ControlPlaneMetrics } from "../../metrics/metrics.js";
import { proxyErrorBody } from "./http.js";
import { withMaskedHost } from "./mask-host.js";

const STATUS_TEXT: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 502: "Bad Gateway" };

/**
 * Answers an upgrade request that will not be tunnelled with a plain HTTP
 * response (the same JSON body as sendProxyError's for HTTP endpoints) and
 * closes the connection: after an Upgrade request there is no
 * ServerResponse, only the socket.
 */
export function refuseUpgrade(socket: Duplex, status: number, message: string, sandboxId?: string): void {
  if (socket.destroyed) return;
  const body = proxyErrorBody(status, message, sandboxId);
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? "Error"}\r\n` +
      "content-type: application/json\r\n" +
      `content-length: ${Buffer.byteLength(body)}\r\n` +
      "access-control-allow-origin: *\r\n" +
      "cache-control: no-store\r\n" +
      "connection: close\r\n\r\n" +
      body,
  );
}

/** The request line and headers as the client sent them (Upgrade and Connection included), Host masked if asked. */
function requestHead(req: IncomingMessage, host: string | undefined, extraHeaders: string[]): string {
  let head = `${req.method} ${req.url} HTTP/1.1\r\n`;
  const raw = [...(host === undefined ? req.rawHeaders : withMaskedHost(req.rawHeaders, host)), ...extraHeaders];
  for (let i = 0; i + 1 < raw.length; i += 2) head += `${raw[i]}: ${raw[i + 1]}\r\n`;
  return `${head}\r\n`;
}

/**
 * A protocol switch (WebSocket, or any other Upgrade) to a server in the
 * sandbox: the client's request goes to `upstream` as it came, and from then
 * on the two connections are one byte stream, the server's 101 (or refusal)
 * included. Back-pressure both ways; either side closing closes the other.
 */
export function tunnelUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  upstream: Duplex,
  metrics: ControlPlaneMetrics,
  /** maskRequestHost: the Host the server sees instead of the client's. */
  host?: string,
  /** Headers added after the client's (name, value, ...): a fleet's API replica adds its node token. */
  extraHeaders: string[] = [],
): void {
  metrics.streamOpened();
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    metrics.streamClosed();
    client.destroy();
    upstream.destroy();
  };
  client.on("close", close);
  upstream.on("close", close);
  client.on("error", close);
  upstream.on("error", close);
  upstream.write(requestHead(req, host, extraHeaders));
  if (head.length) {
    metrics.addProxiedBytes("in", head.length);
    upstream.write(head);
  }
  client.on("data", (chunk: Buffer) => metrics.addProxiedBytes("in", chunk.length));
  upstream.on("data", (chunk: Buffer) => metrics.addProxiedBytes("out", chunk.length));
  client.pipe(upstream);
  upstream.pipe(client);
}
