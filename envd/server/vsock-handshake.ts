import type net from "node:net";
import { ENVD_PORT, FORWARD_PORT } from "../version.js";
import { serveForward } from "./port-forward.js";
import { readLine } from "./read-line.js";

const MAX_LINE = 64;

/**
 * The guest side of the hybrid-vsock handshake on a Unix socket: read
 * `CONNECT <port>\n`, answer `OK <port>\n`, then serve the connection:
 * envd's port, or the user-port forwarder's (port-forward.ts). Anything else
 * is refused and closed.
 */
export function acceptHybridVsock(socket: net.Socket, accept: (socket: net.Socket) => void): void {
  socket.on("error", () => socket.destroy());
  readLine(
    socket,
    Buffer.alloc(0),
    MAX_LINE,
    (line, rest) => {
      const m = /^CONNECT (\d+)$/.exec(line);
      const port = m ? Number(m[1]) : undefined;
      if (port === FORWARD_PORT) {
        socket.write(`OK ${FORWARD_PORT}\n`);
        return serveForward(socket, rest);
      }
      if (port !== ENVD_PORT) return void socket.end(`ERR no listener on port ${m?.[1] ?? "?"}\n`);
      if (rest.length) socket.unshift(rest);
      socket.write(`OK ${ENVD_PORT}\n`);
      accept(socket);
      socket.resume();
    },
    () => socket.destroy(),
  );
}
