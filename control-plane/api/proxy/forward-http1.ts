// The HTTP/1.1 hop of the proxy: one request streamed to a sandbox over a
// pooled vsock connection and the answer streamed back, header names in the
// client's case, no buffering, no timeouts; either side going away ends the
// other. The client may speak HTTP/2 (a browser or curl on https:// picks it
// by ALPN): its request goes on as HTTP/1.1, as a server in a sandbox expects.
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { ControlPlaneMetrics } from "../../metrics/metrics.js";
import { endToEndRawHeaders, hasRawHeader, isConnectPath, SANDBOX_NOT_FOUND, sendProxyError } from "./http.js";
import { withMaskedHost } from "./mask-host.js";

export interface ForwardOptions {
  /** The 502 message when the upstream fails before answering. */
  describe?: (err: NodeJS.ErrnoException) => string;
  /** The Host to send instead of the client's (maskRequestHost). */
  host?: string;
  /** Is the sandbox gone (killed, or being killed)? Then a failure is answered as for an unknown sandbox. */
  gone?: () => boolean;
  /** Headers added after the client's (name, value, ...): a fleet's API replica adds its node token. */
  extraHeaders?: string[];
}

export function forwardHttp1(
  req: IncomingMessage,
  res: ServerResponse,
  sandboxId: string,
  agent: http.Agent,
  metrics: ControlPlaneMetrics,
  opts: ForwardOptions = {},
): void {
  const describe =
    opts.describe ?? ((err) => `sandbox ${sandboxId} is not reachable (${err.code ?? err.message}): it may have been killed or stopped`);
  metrics.streamOpened();
  let closed = false;
  // Header names go on in the client's case (and come back in the server's), as E2B's proxy keeps them.
  let headers = endToEndRawHeaders(req.rawHeaders);
  if (opts.host !== undefined) headers = withMaskedHost(headers, opts.host);
  // An HTTP/2 client names the host in :authority (dropped above with the other pseudo-headers): it becomes Host.
  else if (!hasRawHeader(headers, "host")) headers.push("Host", String(req.headers[":authority"] ?? "localhost"));
  if (opts.extraHeaders) headers.push(...opts.extraHeaders);
  const upstream = http.request({ agent, method: req.method, path: req.url, headers });
  upstream.on("response", (upRes) => {
    const back = endToEndRawHeaders(upRes.rawHeaders);
    res.writeHead(upRes.statusCode ?? 502, back);
    // Streams (no length) get their headers now, not with the first chunk (which may be a while).
    if (!hasRawHeader(back, "content-length")) res.flushHeaders();
    upRes.on("data", (chunk: Buffer) => metrics.addProxiedBytes("out", chunk.length));
    // An upstream failure mid-body destroys the client response: the client sees an error, not a hang.
    upRes.on("close", () => {
      if (!upRes.complete) res.destroy();
    });
    upRes.pipe(res);
  });
  // Upgrade requests never come here (upgrade() tunnels them, and the Upgrade header is not
  // forwarded), so a 101 now is a server switching protocols unasked: refuse it, do not hang.
  upstream.on("upgrade", (_upRes, socket: { destroy(): void }) => {
    socket.destroy();
    if (!res.headersSent) sendProxyError(res, 502, `sandbox ${sandboxId}: the server switched protocols on a request that did not ask to (send Upgrade and Connection: upgrade for a WebSocket)`, false);
  });
  upstream.on("error", (err: NodeJS.ErrnoException) => {
    if (res.headersSent || res.destroyed || closed) {
      res.destroy();
      return;
    }
    if (opts.gone?.()) sendProxyError(res, 502, SANDBOX_NOT_FOUND, isConnectPath(req.url), sandboxId);
    else sendProxyError(res, 502, describe(err), isConnectPath(req.url));
  });
  req.on("data", (chunk: Buffer) => metrics.addProxiedBytes("in", chunk.length));
  // pipe (not pipeline): an upstream failure must not destroy `req`, or the socket goes before the 502.
  req.pipe(upstream);
  req.on("error", () => upstream.destroy());
  res.on("close", () => {
    closed = true;
    metrics.streamClosed();
    // The client went away before the response was complete: abort upstream (envd cancels the RPC).
    // (writableEnded: the HTTP/2 compat response has no writableFinished.)
    if (!res.writableEnded) upstream.destroy();
  });
}
