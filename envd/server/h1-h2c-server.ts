import http from "node:http";
import http2 from "node:http2";
import net from "node:net";
import type { Duplex } from "node:stream";

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** The protocol a connection was handed to: HTTP/1.1 or HTTP/2, in clear text or over TLS (ALPN's `h2`). */
export type ConnectionProtocol = "http/1.1" | "h2c" | "https/1.1" | "h2";

export type RequestHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/**
 * One socket, every protocol: HTTP/1.1 (Connect, gRPC-web, plain HTTP) and
 * h2c with prior knowledge (gRPC, Connect over HTTP/2). The first bytes of a
 * connection decide: the HTTP/2 preface goes to the http2 server, anything
 * else to the HTTP/1.1 server. (Node's plaintext http2 server cannot fall
 * back to HTTP/1.1 by itself.)
 */
export class H1H2cServer {
  private readonly h1: http.Server;
  private readonly h2: http2.Http2Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  /** Every accepted socket: the HTTP/1.1 server never listens itself, so it cannot track them. */
  private readonly sockets = new Set<net.Socket>();

  /**
   * `onUpgrade`: HTTP/1.1 requests with `Upgrade` (WebSocket) go there first;
   * when it returns false, the request is served by `handler` as if it had no
   * Upgrade header (as RFC 9110 allows), e.g. `curl --http2` on cleartext.
   */
  constructor(
    handler: RequestHandler,
    onUpgrade?: (req: http.IncomingMessage, socket: Duplex, head: Buffer) => boolean,
    /** Told which server each connection goes to (the control plane counts them). */
    private readonly onProtocol?: (protocol: ConnectionProtocol) => void,
  ) {
    this.h1 = http.createServer({ keepAliveTimeout: 640_000, requestTimeout: 0, headersTimeout: 60_000 }, handler);
    if (onUpgrade) {
      this.h1.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
        if (!onUpgrade(req, socket, head)) serveWithoutUpgrade(req, socket, head, handler);
      });
    }
    this.h1.keepAliveTimeout = 640_000;
    this.h2 = http2.createServer({}, handler);
    this.h2.on("session", (s) => {
      this.sessions.add(s);
      s.on("close", () => this.sessions.delete(s));
    });
  }

  /** Serves one accepted connection (from any listener: TCP, Unix, hybrid vsock). */
  accept(socket: net.Socket): void {
    this.track(socket);
    let seen: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      seen = seen.length ? Buffer.concat([seen, chunk]) : chunk;
      const n = Math.min(seen.length, PREFACE.length);
      const isH2 = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
      if (isH2 && seen.length < PREFACE.length) return; // need more bytes to decide
      socket.off("data", onData);
      socket.off("error", onError);
      socket.pause();
      socket.unshift(seen);
      if (isH2) {
        // The http2 session reads what is buffered on the next tick; resuming
        // now would flush those bytes to no listener.
        this.serveH2(socket);
      } else {
        this.serveH1(socket);
        // The resume delivers the bytes put back before it announces itself: when they fill the request's
        // buffer, the HTTP server pauses the socket (stopping its reads) and then, on the late `resume`
        // event, starts reading again, with the stream still paused. Every later pause is then a no-op and
        // a request body is read into memory as fast as it comes, whatever its handler does. Stop the
        // reads again in that case, as the pause meant.
        socket.once("resume", () => {
          if (socket.readableFlowing === false) socket.emit("pause");
        });
        socket.resume();
      }
    };
    const onError = () => socket.destroy();
    socket.on("data", onData);
    socket.on("error", onError);
  }

  /** Serves a connection whose protocol is already known (TLS: chosen by ALPN) as HTTP/1.1. */
  serveH1(socket: net.Socket): void {
    this.track(socket);
    this.onProtocol?.(isTls(socket) ? "https/1.1" : "http/1.1");
    this.h1.emit("connection", socket);
  }

  /** Serves a connection whose protocol is already known (TLS: chosen by ALPN, or the h2c preface) as HTTP/2. */
  serveH2(socket: net.Socket): void {
    this.track(socket);
    this.onProtocol?.(isTls(socket) ? "h2" : "h2c");
    this.h2.emit("connection", socket);
  }

  private track(socket: net.Socket): void {
    if (this.sockets.has(socket)) return;
    this.sockets.add(socket);
    socket.once("close", () => this.sockets.delete(socket));
  }

  /** Ends every connection, HTTP/1.1 and HTTP/2 alike (close the listeners first). */
  close(): void {
    for (const s of this.sessions) s.destroy();
    for (const s of this.sockets) s.destroy();
  }
}

function isTls(socket: net.Socket): boolean {
  return (socket as { encrypted?: boolean }).encrypted === true;
}

/**
 * Serves an Upgrade request that nobody upgrades as a plain HTTP/1.1
 * request on its own connection, closed after the response. Node has handed
 * the socket over without its parser, so only a request without a body can
 * be served this way; one with a body is answered 400.
 */
function serveWithoutUpgrade(req: http.IncomingMessage, socket: net.Socket, head: Buffer, handler: RequestHandler): void {
  const hasBody = req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] ?? 0) > 0 || head.length > 0;
  const res = new http.ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket);
  res.on("finish", () => {
    res.detachSocket(socket);
    socket.end();
  });
  socket.on("error", () => socket.destroy());
  socket.on("close", () => res.destroy());
  if (hasBody) {
    const body = JSON.stringify({ code: 400, message: `this server does not switch to '${req.headers.upgrade}': send the request without Upgrade` });
    res.writeHead(400, { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) }).end(body);
    return;
  }
  req.push(null); // no body: the request is complete
  handler(req, res);
}
