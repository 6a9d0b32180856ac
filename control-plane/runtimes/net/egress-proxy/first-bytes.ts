// The name a new connection gives for its destination, from the bytes it
// sends first: the TLS ClientHello's SNI or the HTTP/1.x Host header. The
// socket is resumed to read them; they are kept to be sent on unchanged, and
// the socket is left paused.
import type { Socket } from "node:net";
import { peekClientHello } from "./client-hello.js";
import { peekHttpHost } from "./http-host.js";

/**
 * What the client said. `name` is undefined when it hides it (no SNI, an
 * encrypted ClientHello, no Host, a protocol other than TLS and HTTP/1.x,
 * or nothing sent before `waitMs`: server-speaks-first protocols).
 */
export interface FirstBytes {
  kind: "tls" | "http" | "other" | "silent";
  name?: string;
  head: Buffer;
  /** The client closed (or failed) before a verdict: nothing to forward. */
  ended: boolean;
}

/** At most this much is read before the name must have been seen (a ClientHello with post-quantum key shares is ~2 KiB). */
export const PEEK_LIMIT = 32 * 1024;

function judge(head: Buffer, full: boolean): Omit<FirstBytes, "head" | "ended"> | undefined {
  const tls = peekClientHello(head);
  if (tls.state === "done") return { kind: "tls", ...(tls.name !== undefined && !tls.ech ? { name: tls.name } : {}) };
  const http = tls.state === "other" ? peekHttpHost(head) : ({ state: "more" } as const);
  if (http.state === "done") return { kind: "http", ...(http.name !== undefined ? { name: http.name } : {}) };
  if (tls.state === "other" && http.state === "other") return { kind: "other" };
  return full ? { kind: "other" } : undefined;
}

export function readFirstBytes(socket: Socket, waitMs: number): Promise<FirstBytes> {
  return new Promise((resolve) => {
    let head = Buffer.alloc(0);
    const finish = (r: Omit<FirstBytes, "head" | "ended">, ended = false) => {
      clearTimeout(timer);
      socket.off("data", onData).off("end", onEnd).off("error", onEnd).off("close", onEnd);
      socket.pause();
      resolve({ ...r, head, ended });
    };
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const r = judge(head, head.length >= PEEK_LIMIT);
      if (r) finish(r);
    };
    const onEnd = () => finish({ kind: head.length ? "other" : "silent" }, true);
    const timer = setTimeout(() => finish({ kind: head.length ? "other" : "silent" }), waitMs);
    socket.on("data", onData).once("end", onEnd).once("error", onEnd).once("close", onEnd);
    socket.resume();
  });
}
