import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { getSystemErrorName, promisify } from "node:util";
import { spawnTurn } from "../process/handler/spawn-turns.js";
import { RequestAbortedError } from "./body.js";
import { describeEnd, moverBinary, plainSocketFd, runMover } from "./file-mover.js";
import { receiveInto, writeAll } from "./file-receiver.js";

/**
 * Below this, a request body is copied by envd (file-receiver.ts): starting
 * the receiver forks envd (a few ms of CPU), more than copying a few MiB costs.
 */
export const SPLICE_MIN_BYTES = 16 * 1024 * 1024;

/** `locale2b-init --receive`'s exit statuses (rootfs/init/receive.c). */
const RECEIVED = 0;
const CLIENT_GONE = 2;
const WRITE_FAILED = 3;

const writeAllAsync = promisify(writeAll);

let receives = 0;
/** Request bodies received so far with splice (for tests and diagnostics). */
export function zeroCopyReceives(): number {
  return receives;
}

/** The parts of Node's HTTP/1.1 server state this relies on (node:_http_server, Node 20). */
interface ServerSocket {
  /** Set, Node's server neither resumes reading the socket nor lets the request do it. */
  _paused?: boolean;
  _handle?: { reading?: boolean; _consumed?: boolean };
}

/**
 * The socket's descriptor when `req` is a plain HTTP/1.1 request whose large,
 * identity, Content-Length body can be taken off the socket by another
 * process: Node's HTTP parser reads the socket's handle itself (so stopping
 * the handle stops every read at once) and the request is the connection's
 * current one.
 */
function spliceable(req: IncomingMessage, res: ServerResponse): { socket: Socket; fd: number; length: number } | undefined {
  if (req.httpVersionMajor !== 1 || req.headers["transfer-encoding"] !== undefined || req.complete) return undefined;
  const length = Number(req.headers["content-length"]);
  if (!Number.isSafeInteger(length) || length < SPLICE_MIN_BYTES || res.socket !== req.socket) return undefined;
  const socket = req.socket;
  const fd = plainSocketFd(socket);
  // Consumed: Node's parser reads the handle itself (nothing waits in the socket's own buffer).
  const handle = (socket as unknown as ServerSocket)._handle;
  if (fd === undefined || !handle?._consumed) return undefined;
  return socket.listenerCount("data") > 1 || socket.readableLength > 0 ? undefined : { socket, fd, length };
}

/**
 * Writes the request body into the open file `fd` (positioned at 0):
 * a large identity body of a plain HTTP/1.1 request goes from the socket
 * to the file with splice(2) through the init binary (`locale2b-init
 * --receive`), so its bytes never pass through envd; anything else is
 * copied by envd (receiveInto). Resolves once the whole body is in the file.
 * After a spliced body Node's parser is moved past it (catchUpParser), so
 * the connection stays usable; where it cannot be, `res` is set to close it.
 * Rejects with RequestAbortedError when the client went away first, or with
 * the write's error (then the body was read to its end, so an answer can
 * still be sent).
 */
export async function receiveBody(fd: number, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const binary = spliceable(req, res) && (await moverBinary());
  const target = binary && spliceable(req, res); // again: the helper check may have waited
  if (!binary || !target) return receiveInto(fd, req);
  const { socket, length } = target;
  const server = socket as unknown as ServerSocket;

  // Stop envd's reads: pausing the socket makes Node's HTTP server stop its handle at once, and `_paused`
  // keeps a resume already scheduled (or the request's own reads) from starting it again. A handle that
  // reads on anyway would race the receiver for the body: then envd copies.
  const wasFlowing = socket.readableFlowing;
  socket.pause();
  if (server._handle?.reading) {
    if (wasFlowing) socket.resume();
    return receiveInto(fd, req);
  }
  server._paused = true;
  // What Node read before it stopped is in the request's buffer: take it without asking for more.
  const head: Buffer[] = [];
  const own = req as unknown as { _read?: unknown };
  own._read = () => undefined;
  try {
    for (let chunk: Buffer | null; (chunk = req.read() as Buffer | null) !== null; ) head.push(chunk);
  } finally {
    delete own._read;
  }
  const taken = head.reduce((n, c) => n + c.length, 0);
  if (taken > 0) await writeAllAsync(fd, head);

  // From here on Node's parser is behind the socket: unless it catches up, the connection ends with this request.
  const keepAlive = res.shouldKeepAlive;
  res.shouldKeepAlive = false;
  const inStep = () => {
    res.shouldKeepAlive = keepAlive;
    server._paused = false;
  };
  await spawnTurn();
  // Checked right before the spawn (synchronously): a descriptor closed meanwhile could be another connection's by now.
  if (plainSocketFd(socket) !== target.fd) {
    socket.destroy();
    throw new RequestAbortedError();
  }
  const moved = await runMover(binary, ["--receive", String(length - taken)], target.fd, fd);
  const { status } = moved;
  if ((status === RECEIVED || status === WRITE_FAILED) && catchUpParser(req, socket, length - taken)) {
    // The whole body was read: the connection goes on with the next request, after this one's answer.
    inStep();
    socket.resume();
  }
  if (status === RECEIVED) {
    receives++;
    return;
  }
  if (status === undefined) {
    // Not started: nothing more was read, so Node's parser is still in step: it reads the rest.
    inStep();
    return receiveInto(fd, req);
  }
  if (status === WRITE_FAILED) throw writeError(Number(/write errno (\d+)/.exec(moved.stderr)?.[1]), moved.stderr);
  socket.destroy();
  if (status === CLIENT_GONE) throw new RequestAbortedError();
  throw new Error(`receiving the upload failed (${describeEnd(moved)})`);
}

/** Body bytes Node's parser is given at a time while it catches up. */
const CATCH_UP_CHUNK = 1024 * 1024;

/** Node's HTTP parser (node:_http_common), as far as catching up needs it. */
interface Parser {
  execute(b: Buffer): number | Error;
  [slot: number]: unknown;
}

/**
 * Moves Node's HTTP parser past the `count` body bytes the receiver took
 * off the socket, so the request completes as if Node had read them and the
 * connection carries the next one (keep-alive, as on the copying path). The
 * parser is given zeros with its body callback unset: it only counts them
 * (no copies, no chunks), so a GiB costs a few ms. False when the parser
 * cannot be driven so (then the connection closes after the answer).
 */
function catchUpParser(req: IncomingMessage, socket: Socket, count: number): boolean {
  const parser = (socket as unknown as { parser?: Parser }).parser;
  const kOnBody = (parser?.constructor as { kOnBody?: unknown } | undefined)?.kOnBody;
  if (typeof parser?.execute !== "function" || typeof kOnBody !== "number" || typeof parser[kOnBody] !== "function") return false;
  const onBody = parser[kOnBody];
  parser[kOnBody] = undefined;
  // Dumped, the request would drop anything the parser still handed it (node:_http_common's parserOnBody).
  (req as unknown as { _dumped: boolean })._dumped = true;
  req.resume();
  const zeros = Buffer.alloc(Math.min(count, CATCH_UP_CHUNK));
  try {
    for (let left = count; left > 0; ) {
      const n = Math.min(left, zeros.length);
      if (parser.execute(n === zeros.length ? zeros : zeros.subarray(0, n)) !== n) return false;
      left -= n;
    }
  } finally {
    parser[kOnBody] = onBody;
  }
  return req.complete;
}

/** The receiver's failed write as the errno error fs would have raised (ENOSPC answers 507). */
function writeError(errno: number, message: string): Error {
  const err = new Error(message) as NodeJS.ErrnoException;
  if (Number.isInteger(errno) && errno > 0) {
    try {
      err.code = getSystemErrorName(-errno);
    } catch {
      // an errno Node does not know: no code
    }
    err.errno = -errno;
  }
  return err;
}

