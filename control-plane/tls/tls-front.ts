// TLS on the control plane's one port: every accepted connection goes
// through a TLS handshake that offers h2 and http/1.1 by ALPN, then to the
// same HTTP/1.1 or HTTP/2 server as a plain connection would. A client that
// speaks plain HTTP to this port gets a readable refusal at once, not a hang.
import net from "node:net";
import tls from "node:tls";
import type { Logger } from "pino";
import type { H1H2cServer } from "../../envd/server/h1-h2c-server.js";
import { loadPairs, pairFor, TlsConfigError, type CertificatePair } from "./certificates.js";
import { watchFiles, type FileWatch } from "./watch.js";

const TLS_HANDSHAKE = 0x16;
const H2_PREFACE = "PRI * HTTP/2.0";

export interface TlsFrontOptions {
  /** The pairs to serve, already loaded (loadPairs): the first is the default, the others are chosen by SNI. */
  pairs: CertificatePair[];
  /** The HTTP servers connections go to once the handshake is done. */
  http: H1H2cServer;
  log: Logger;
  /** Watch the files and reload on change (default true). */
  watch?: boolean;
}

export class TlsFront {
  private pairs: CertificatePair[];
  private readonly server: tls.Server;
  /** Every accepted connection (the HTTP servers know only those past their handshake). */
  private readonly sockets = new Set<net.Socket>();
  private readonly watcher: FileWatch | undefined;
  private readonly log: Logger;
  /** The digest of files that failed to load once: a second failure of the same bytes is logged. */
  private failedOnce: string | undefined;
  private loggedFailure: string | undefined;
  private reloading: Promise<void> = Promise.resolve();

  constructor(opts: TlsFrontOptions) {
    if (!opts.pairs.length) throw new TlsConfigError("TLS needs at least one certificate and key pair");
    this.pairs = opts.pairs;
    this.log = opts.log.child({ component: "tls" });
    const first = this.pairs[0]!;
    this.server = tls.createServer({
      cert: first.cert,
      key: first.key,
      ALPNProtocols: ["h2", "http/1.1"],
      // One pair: no need to look at the name. Several: the one whose names cover it, else the first.
      ...(this.pairs.length > 1 ? { SNICallback: (name: string, cb: (err: Error | null, ctx?: tls.SecureContext) => void) => cb(null, this.contextFor(name)) } : {}),
    });
    this.server.on("secureConnection", (socket: tls.TLSSocket) => {
      if (socket.alpnProtocol === "h2") opts.http.serveH2(socket);
      else opts.http.serveH1(socket);
    });
    this.server.on("tlsClientError", (err: NodeJS.ErrnoException, socket: tls.TLSSocket) => {
      this.log.debug({ err: err.message, code: err.code, remote: socket.remoteAddress }, "TLS handshake failed");
      socket.destroy();
    });
    if (opts.watch !== false) {
      const files = this.pairs.flatMap((p) => [p.files.cert, p.files.key]);
      this.watcher = watchFiles(files, () => this.check(), this.log);
    }
  }

  /** The names and expiry of what is served now. */
  get certificates(): readonly CertificatePair[] {
    return this.pairs;
  }

  /** SNI: the pair covering the name; undefined keeps the server's default (the first pair). */
  private contextFor(servername: string): tls.SecureContext | undefined {
    return pairFor(this.pairs, servername)?.context;
  }

  /** Serves one accepted connection: a TLS handshake, or a refusal when it speaks plain HTTP. */
  accept(socket: net.Socket): void {
    // The HTTP servers' setNoDelay reaches the TLS socket, not this one under it: without this, Nagle holds
    // back the small records of a request's answer until the client's delayed ACK (40 ms per round trip).
    socket.setNoDelay(true);
    this.sockets.add(socket);
    socket.once("close", () => this.sockets.delete(socket));
    const onData = (first: Buffer) => {
      socket.off("data", onData);
      socket.off("error", onError);
      if (first[0] !== TLS_HANDSHAKE) return refusePlaintext(socket, first, this.log);
      socket.pause();
      // The TLS socket reads what is buffered before it reads from the connection.
      socket.unshift(first);
      this.server.emit("connection", socket);
    };
    const onError = () => socket.destroy();
    socket.on("data", onData);
    socket.on("error", onError);
  }

  /**
   * Reads the files again and serves them from the next handshake on, when
   * they changed and load; open connections keep the certificate they began
   * with. A pair that does not load is logged (once it failed twice: a
   * certificate and its key are often written one after the other) and the
   * previous certificate stays.
   */
  check(): Promise<void> {
    this.reloading = this.reloading.then(() => this.reload());
    return this.reloading;
  }

  private async reload(): Promise<void> {
    const files = this.pairs.map((p) => p.files);
    let next: CertificatePair[];
    try {
      next = await loadPairs(files);
    } catch (err) {
      const key = (err as Error).message;
      if (this.failedOnce !== key) {
        // Maybe caught half-written: look again in a moment.
        this.failedOnce = key;
        setTimeout(() => void this.check(), 1000).unref();
        return;
      }
      if (this.loggedFailure !== key) {
        this.loggedFailure = key;
        this.log.error(
          { err: key, serving: this.pairs.map((p) => ({ names: p.names, notAfter: p.notAfter.toISOString(), fingerprint256: p.fingerprint256 })) },
          "TLS: the changed certificate files cannot be served; still serving the previous certificate",
        );
      }
      return;
    }
    this.failedOnce = undefined;
    this.loggedFailure = undefined;
    if (next.every((p, i) => p.digest === this.pairs[i]?.digest)) return;
    this.server.setSecureContext({ cert: next[0]!.cert, key: next[0]!.key });
    this.pairs = next;
    this.log.info(
      { certificates: next.map((p) => ({ names: p.names, notAfter: p.notAfter.toISOString(), fingerprint256: p.fingerprint256 })) },
      "TLS: certificate reloaded; new connections use it, open ones keep theirs",
    );
  }

  /** Stops watching and ends every connection. */
  close(): void {
    this.watcher?.close();
    for (const s of this.sockets) s.destroy();
  }
}

/**
 * A plain-HTTP client on the TLS port: an HTTP/1.x request gets a `400`
 * saying to use https (as nginx does), an h2c client a GOAWAY carrying the
 * same words; anything else is closed. Then the connection is closed.
 */
function refusePlaintext(socket: net.Socket, first: Buffer, log: Logger): void {
  const text = first.subarray(0, 4096).toString("latin1");
  log.debug({ remote: socket.remoteAddress, start: text.slice(0, 40) }, "TLS: a plain-text client on the TLS port was refused");
  if (text.startsWith(H2_PREFACE)) {
    socket.end(h2GoAway("this port serves HTTP/2 over TLS only: connect with https://"));
  } else if (/^[A-Z]+(?: |$)/.test(text)) {
    const host = /\r\nhost:[ \t]*([A-Za-z0-9.:[\]-]{1,300})\r\n/i.exec(text)?.[1];
    const path = /^[A-Z]+ (\/\S{0,2000}) HTTP\//.exec(text)?.[1] ?? "/";
    const body = `This port serves HTTPS only: use ${host ? `https://${host}${path}` : "https:// instead of http://"}\n`;
    socket.end(
      `HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  } else {
    socket.destroy();
    return;
  }
  // Read what the client still sends (a request body) so that closing does not reset the connection before it reads the answer.
  socket.on("data", () => undefined);
  socket.on("error", () => socket.destroy());
  setTimeout(() => socket.destroy(), 2000).unref();
}

/** An HTTP/2 server preface (empty SETTINGS) and a GOAWAY (PROTOCOL_ERROR) with `message` as its debug data. */
function h2GoAway(message: string): Buffer {
  const frame = (type: number, payload: Buffer) => {
    const head = Buffer.alloc(9);
    head.writeUIntBE(payload.length, 0, 3);
    head[3] = type;
    return Buffer.concat([head, payload]);
  };
  const goaway = Buffer.alloc(8);
  goaway.writeUInt32BE(0, 0); // last stream id
  goaway.writeUInt32BE(1, 4); // PROTOCOL_ERROR
  return Buffer.concat([frame(0x4, Buffer.alloc(0)), frame(0x7, Buffer.concat([goaway, Buffer.from(message)]))]);
}
