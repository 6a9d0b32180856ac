import type { ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { spawnTurn } from "../process/handler/spawn-turns.js";
import { describeEnd, moverBinary, plainSocketFd, runMover } from "./file-mover.js";

/**
 * Below this, a response is copied by envd (file-sender.ts): starting the
 * sender forks envd (about 3 ms of CPU here), which costs more than copying
 * a few MiB (0.45 s of CPU per GiB).
 */
export const SENDFILE_MIN_BYTES = 16 * 1024 * 1024;

/** `locale2b-init --sendfile`'s exit statuses (rootfs/init/sendfile.c). */
const SENT = 0;
const CLIENT_GONE = 2;
const UNSUPPORTED = 4;

let sends = 0;
/** Responses sent so far with sendfile (for tests and diagnostics). */
export function zeroCopySends(): number {
  return sends;
}

/**
 * The descriptor of the plain socket under the response, if the response
 * writes straight to it (not queued behind an earlier response on the
 * connection); undefined for HTTP/2 or TLS.
 */
function socketFd(res: ServerResponse): number | undefined {
  if ((res.socket as unknown as { _httpMessage?: unknown } | null)?._httpMessage !== res) return undefined;
  return plainSocketFd(res.socket);
}

/**
 * Sends bytes `start..end` (inclusive) of the open file `fd` as the body of
 * `res` (its headers written, nothing else) with sendfile(2), through the
 * init binary (`locale2b-init --sendfile`: Node has no sendfile), so the bytes
 * never pass through envd. Resolves true once all were sent and `res` ended;
 * false when this cannot be used here (a small range, HTTP/2, no init
 * binary, a descriptor sendfile refuses): nothing was written, the caller
 * copies. Rejects (`res` destroyed) when the client went away or the file
 * shrank.
 */
export async function sendFileZeroCopy(fd: number, start: number, end: number, res: ServerResponse): Promise<boolean> {
  const count = end - start + 1;
  if (count < SENDFILE_MIN_BYTES) return false;
  // A response queued behind the previous one on its connection (the client, having all of that one's
  // bytes from its sender, asked again before envd ended it) gets the socket once that one ends.
  if (!res.socket && res.req.socket) {
    const connection = res.req.socket;
    await new Promise<void>((resolve) => {
      const done = () => {
        res.off("socket", done);
        connection.off("close", done);
        resolve();
      };
      res.once("socket", done);
      connection.once("close", done);
    });
  }
  const out = socketFd(res);
  if (out === undefined) return false;
  const binary = await moverBinary();
  if (!binary) return false;
  const socket = res.socket as Socket;
  // The headers go first, and alone: the sender writes on the same socket.
  res.flushHeaders();
  if (socket.writableLength > 0) await new Promise<void>((resolve) => socket.once("drain", resolve).once("close", resolve));
  await spawnTurn();
  // Checked right before the spawn (synchronously): a descriptor closed meanwhile could be another connection's by now.
  if (socketFd(res) !== out) {
    const err = new Error("the client closed the connection before the file was sent");
    res.destroy(err);
    throw err;
  }
  // The socket by its descriptor, not as a stream: Node would stop reading a stream it hands to a child
  // (envd's HTTP server reads the connection's next request meanwhile, and answers it after this one).
  // The sender holds the connection open while it runs: it must not outlive envd's side of it.
  const moved = await runMover(binary, ["--sendfile", String(start), String(count)], fd, out, socket);
  const { status } = moved;
  if (status === SENT) {
    sends++;
    res.end();
    return true;
  }
  if (status === UNSUPPORTED || status === undefined) return false;
  const why = status === CLIENT_GONE ? "the client closed the connection before the file was sent" : `sending the file failed (${describeEnd(moved)})`;
  const err = new Error(why);
  res.destroy(err);
  throw err;
}
