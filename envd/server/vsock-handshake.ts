import type net from "node:net";
import { ENVD_PORT, FORWARD_PORT } from "../version.js";
import { serveForward } from "./port-forward.js";

const MAX_LINE = 64;

/**
 * The guest side of the hybrid-vsock handshake on a Unix socket: read
 * `CONNECT <port>\n`, answer `OK <port>\n`, then serve the connection:
 * envd's port, or the user-port forwarder's (port-forward.ts). Anything else
 * is refused and closed.
 */
export function acceptHybridVsock(socket: net.Socket, accept: (socket: net.Socket) => void): void {
  let seen = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    seen = Buffer.concat([seen, chunk]);
    const nl = seen.indexOf(10);
    if (nl < 0) {
      if (seen.length > MAX_LINE) socket.destroy();
      return;
    }
    socket.off("data", onData);
    const m = /^CONNECT (\d+)$/.exec(seen.subarray(0, nl).toString("latin1").trim());
    const port = m ? Number(m[1]) : undefined;
    const rest = seen.subarray(nl + 1);
    if (port === FORWARD_PORT) {
      socket.write(`OK ${FORWARD_PORT}\n`);
      serveForward(socket, rest);
      return;
    }
    if (port !== ENVD_PORT) {
      socket.end(`ERR no listener on port ${m?.[1] ?? "?"}\n`);
      return;
    }
    socket.pause();
    if (rest.length) socket.unshift(rest);
    socket.write(`OK ${ENVD_PORT}\n`);
    accept(socket);
    socket.resume();
  };
  socket.on("error", () => socket.destroy());
  socket.on("data", onData);
}
