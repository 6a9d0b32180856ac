import http2 from "node:http2";
import type { Http2ServerRequest, Http2ServerResponse, OutgoingHttpHeaders } from "node:http2";
import type { IncomingHttpHeaders } from "node:http";
import type { ControlPlaneMetrics } from "../../metrics/metrics.js";
import { forwardHeaders, responseHeaders } from "./http.js";

/**
 * HTTP/2 clients (gRPC, Connect over h2c) are forwarded over HTTP/2: gRPC
 * needs trailers and full duplex streams, which an HTTP/1.1 hop cannot
 * carry. The session is the endpoint's (one multiplexed session per sandbox).
 */
export function forwardH2(
  req: Http2ServerRequest,
  res: Http2ServerResponse,
  session: http2.ClientHttp2Session,
  metrics: ControlPlaneMetrics,
  onError: (err: Error) => void,
): void {
  metrics.streamOpened();
  const headers: OutgoingHttpHeaders = {
    ...forwardHeaders(req.headers as IncomingHttpHeaders),
    ":method": req.method,
    ":path": req.url,
  };
  if (/trailers/i.test(String(req.headers.te ?? ""))) headers.te = "trailers";
  const upstream = session.request(headers);
  upstream.on("response", (h) => {
    const { ":status": status, ...rest } = h;
    res.writeHead(Number(status) || 502, responseHeaders(rest as IncomingHttpHeaders));
  });
  upstream.on("trailers", (t) => {
    const trailers: Record<string, string> = {};
    for (const [k, v] of Object.entries(t)) if (!k.startsWith(":") && v !== undefined) trailers[k] = String(v);
    res.addTrailers(trailers);
  });
  upstream.on("data", (chunk: Buffer) => metrics.addProxiedBytes("out", chunk.length));
  upstream.pipe(res);
  upstream.on("error", (err) => (res.headersSent ? res.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR) : onError(err)));
  req.on("data", (chunk: Buffer) => metrics.addProxiedBytes("in", chunk.length));
  req.pipe(upstream);
  req.on("error", () => upstream.close(http2.constants.NGHTTP2_CANCEL));
  res.on("close", () => {
    metrics.streamClosed();
    if (!upstream.closed) upstream.close(http2.constants.NGHTTP2_CANCEL);
  });
}
