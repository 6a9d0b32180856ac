// The handoff for a connection to a host with request rules (network.rules):
// the proxy is the server. TLS is terminated with a certificate for the name
// the client asked for, signed by the server's egress CA (ca.ts; sandboxes
// with rules trust it: trust-install.ts), advertising http/1.1 only; plain
// HTTP is read as it is. Node's own HTTP server parses the requests (the
// socket is handed to it with emit('connection')), each request's headers
// are transformed (transforms.ts) and it is sent on with Node's HTTP client
// to where the connection was going, over TLS the proxy verifies itself
// (the host's CAs, for the name the client asked for: a bad certificate
// fails the request, never passes it), on a keep-alive connection of this
// sandbox's own agents. Bodies stream both ways (pipe: back-pressure);
// WebSocket upgrades are passed through after their request's transform.
import http from "node:http";
import https from "node:https";
import type { Socket } from "node:net";
import tls from "node:tls";
import type { Logger } from "pino";
import type { NetworkRule } from "../../../domain/network.js";
import type { EgressCa } from "./ca.js";
import type { AllowedConnection } from "./sandbox-proxy.js";
import { TransformError, transformHeaders } from "./transforms.js";

/** Hop-by-hop headers (RFC 9110 §7.6.1): the proxy's own business on each side. */
const HOP = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate"]);

interface Conn {
  sandboxId: string;
  /** The name the connection asked for (SNI, or the first request's Host). */
  name: string;
  tls: boolean;
  address: string;
  port: number;
  log: Logger;
}

const CONN = Symbol("egress-intercept");
type Tagged = Socket & { [CONN]?: Conn };

function withoutHop(raw: string[], keepUpgrade: boolean): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const n = raw[i]!.toLowerCase();
    if (HOP.has(n) && !(keepUpgrade && n === "connection")) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/** The host part of a Host header (`name`, `name:port`, `[v6]:port`), lowercased. */
function hostOf(value: string | undefined): string {
  const v = (value ?? "").trim().toLowerCase();
  if (v.startsWith("[")) return v.slice(1, v.indexOf("]") >>> 0);
  const colon = v.lastIndexOf(":");
  return (colon >= 0 && /^\d*$/.test(v.slice(colon + 1)) ? v.slice(0, colon) : v).replace(/\.$/, "");
}

function refuse(res: http.ServerResponse, status: number, message: string): void {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "x-locale2b-egress": "refused", connection: "close" });
  res.end(`locale2b egress proxy: ${message}\n`);
}

/** One sandbox's interception: its HTTP server (fed the sandbox's sockets) and its upstream agents. */
export class Interceptor {
  private readonly server: http.Server;
  private readonly httpsAgent: https.Agent;
  private readonly httpAgent = new http.Agent({ keepAlive: true, maxFreeSockets: 32 });

  constructor(
    private readonly o: {
      ca: EgressCa;
      /** The CAs upstream certificates are verified against. */
      upstream: tls.SecureContext;
      /** The current rules for a name (read per request: updateNetwork applies to keep-alive connections too). */
      rulesFor: (name: string) => NetworkRule[] | undefined;
    },
  ) {
    this.httpsAgent = new https.Agent({ keepAlive: true, maxFreeSockets: 32, secureContext: o.upstream, rejectUnauthorized: true });
    // No timeouts of Node's own on the sandbox's side: a long poll or a stream lasts as long as both ends want.
    this.server = http.createServer({ requestTimeout: 0, headersTimeout: 60_000, keepAliveTimeout: 120_000 }, (req, res) => void this.forward(req, res));
    this.server.on("upgrade", (req: http.IncomingMessage, socket: Socket, head: Buffer) => void this.upgrade(req, socket, head));
    this.server.on("clientError", (_err, socket: Socket) => socket.destroy());
  }

  /** Takes an allowed connection that `first.name` has rules for (its kind is tls or http). */
  take({ sandboxId, client, head, destination, first, log }: AllowedConnection): void {
    const conn: Conn = { sandboxId, name: first.name!.toLowerCase().replace(/\.$/, ""), tls: first.kind === "tls", address: destination.address, port: destination.port, log };
    client.unshift(head);
    if (!conn.tls) {
      (client as Tagged)[CONN] = conn;
      this.server.emit("connection", client);
      return void client.resume();
    }
    // The TLS socket reads what the client socket has buffered (the ClientHello) and then its handle: the client is not resumed.
    const secure = new tls.TLSSocket(client, { isServer: true, secureContext: this.o.ca.contextFor(conn.name), ALPNProtocols: ["http/1.1"] }) as tls.TLSSocket & Tagged;
    secure[CONN] = conn;
    secure.on("error", (err) => {
      log.debug({ err: err.message, name: conn.name }, "intercepted TLS from the sandbox failed");
      client.destroy();
    });
    this.server.emit("connection", secure);
  }

  /** The connection a request came on, and the headers it goes on with; or a refusal already answered. */
  private async prepare(req: http.IncomingMessage, upgrade: boolean): Promise<{ conn: Conn; headers: string[] } | { refused: [number, string] }> {
    const conn = (req.socket as Tagged)[CONN]!;
    // Every request on the connection must name the host the connection was let through (and intercepted) for.
    if (hostOf(req.headers.host) !== conn.name) {
      return { refused: [421, `this connection is for '${conn.name}': a request for '${hostOf(req.headers.host) || "(no Host)"}' needs a connection of its own`] };
    }
    const rules = this.o.rulesFor(conn.name) ?? [];
    try {
      return { conn, headers: await transformHeaders(withoutHop(req.rawHeaders, upgrade), rules, conn.sandboxId) };
    } catch (err) {
      if (!(err instanceof TransformError)) throw err;
      conn.log.warn({ name: conn.name, reason: err.message, ...(err.cause ? { err: err.cause } : {}) }, "egress request refused: its rules could not be applied");
      return { refused: [502, `the network rule for '${conn.name}' could not be applied, so the request was not sent: ${err.message}`] };
    }
  }

  private upstreamOptions(conn: Conn, req: http.IncomingMessage, headers: string[]): https.RequestOptions {
    return {
      host: conn.address,
      port: conn.port,
      method: req.method!,
      path: req.url!,
      headers: headers as unknown as http.OutgoingHttpHeaders, // Node takes rawHeaders' flat list too
      setHost: false,
      ...(conn.tls ? { servername: conn.name, secureContext: this.o.upstream, rejectUnauthorized: true, agent: this.httpsAgent } : { agent: this.httpAgent }),
    };
  }

  private async forward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const p = await this.prepare(req, false);
    if ("refused" in p) {
      req.resume();
      return refuse(res, ...p.refused);
    }
    const { conn, headers } = p;
    const up = (conn.tls ? https : http).request(this.upstreamOptions(conn, req, headers), (ures) => {
      res.writeHead(ures.statusCode!, ures.statusMessage, withoutHop(ures.rawHeaders, false) as unknown as http.OutgoingHttpHeaders);
      ures.pipe(res);
      ures.on("error", () => res.destroy());
    });
    up.on("error", (err) => {
      conn.log.debug({ err: err.message, name: conn.name }, "intercepted request's upstream failed");
      const why = (err as NodeJS.ErrnoException).code ?? err.message;
      refuse(res, 502, `'${conn.name}' (${conn.address}:${conn.port}) failed: ${why}${conn.tls ? " (its certificate is verified against the host's CAs)" : ""}`);
    });
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  }

  private async upgrade(req: http.IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    socket.on("error", () => undefined);
    const p = await this.prepare(req, true);
    if ("refused" in p) return void socket.end(`HTTP/1.1 ${p.refused[0]} Refused\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nlocale2b egress proxy: ${p.refused[1]}\n`);
    const { conn, headers } = p;
    const up = (conn.tls ? https : http).request({ ...this.upstreamOptions(conn, req, headers), agent: false });
    up.on("upgrade", (ures, usock: Socket, uhead: Buffer) => {
      const lines = [`HTTP/1.1 ${ures.statusCode} ${ures.statusMessage}`];
      for (let i = 0; i + 1 < ures.rawHeaders.length; i += 2) lines.push(`${ures.rawHeaders[i]}: ${ures.rawHeaders[i + 1]}`);
      socket.write(lines.join("\r\n") + "\r\n\r\n");
      if (uhead.length) socket.write(uhead);
      if (head.length) usock.write(head);
      usock.on("error", () => socket.destroy());
      socket.on("close", () => usock.destroy());
      usock.on("close", () => socket.destroy());
      usock.pipe(socket);
      socket.pipe(usock);
    });
    up.on("response", (ures) => {
      // Not upgraded: the answer goes back as it is, and the connection ends.
      const lines = [`HTTP/1.1 ${ures.statusCode} ${ures.statusMessage}`];
      const raw = withoutHop(ures.rawHeaders, false);
      for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]!.toLowerCase() !== "transfer-encoding") lines.push(`${raw[i]}: ${raw[i + 1]}`);
      socket.write(lines.join("\r\n") + "\r\nconnection: close\r\n\r\n");
      ures.pipe(socket);
    });
    up.on("error", (err) => socket.end(`HTTP/1.1 502 Bad Gateway\r\nconnection: close\r\n\r\nlocale2b egress proxy: '${conn.name}' failed: ${(err as NodeJS.ErrnoException).code ?? err.message}\n`));
    up.end();
  }

  /** Closes the upstream connections kept for reuse (the sandbox's own sockets close with the proxy). */
  close(): void {
    this.httpsAgent.destroy();
    this.httpAgent.destroy();
    this.server.close();
  }
}
