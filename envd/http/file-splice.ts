import { spawn } from "node:child_process";
import type { IncomingMessage, ServerResponse } from "node:http";
import { Socket } from "node:net";
import { getSystemErrorName, promisify } from "node:util";
import { spawnHelper } from "../process/handler/spawn-helper.js";
import { spawnTurn } from "../process/handler/spawn-turns.js";
import { RequestAbortedError } from "./body.js";
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
  _handle?: { fd?: number; reading?: boolean; readStop?: () => number; _consumed?: boolean };
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
  if (!Number.isSafeInteger(length) || length < SPLICE_MIN_BYTES) return undefined;
  const socket = req.socket;
  if (!(socket instanceof Socket) || "encrypted" in socket || socket.destroyed || res.socket !== socket) return undefined;
  // Consumed: Node's parser reads the handle itself (nothing waits in the socket's own buffer).
  const handle = (socket as unknown as ServerSocket)._handle;
  if (!handle?._consumed || typeof handle.readStop !== "function" || socket.listenerCount("data") > 1 || socket.readableLength > 0) return undefined;
  const fd = handle.fd;
  return typeof fd === "number" && fd >= 0 ? { socket, fd, length } : undefined;
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
  const binary = process.env.LOCALE2B_SPAWN_HELPER;
  if (!binary || !spliceable(req, res) || !(await spawnHelper())) return receiveInto(fd, req);
  const target = spliceable(req, res); // again: the helper check may have waited
  if (!target) return receiveInto(fd, req);
  const { socket, length } = target;
  const server = socket as unknown as ServerSocket;

  // Stop envd's reads at once, as the pause handler of Node's HTTP server does (the stream may be paused
  // already while its handle reads on), and set `_paused`, which keeps a resume already scheduled (or the
  // request's own reads) from starting it again.
  socket.pause();
  server._paused = true;
  const handle = server._handle!;
  if (handle.reading) {
    handle.reading = false;
    handle.readStop!();
  }
  // What Node read before it stopped is in the request's buffer: take it without asking for more.
  const head: Buffer[] = [];
  const own = req as unknown as { _read?: unknown };
  own._read = () => undefined;
  try {
    for (let chunk: Buffer | null; (chunk = req.read() as Buffer | null) !== null; ) head.push(chunk);
  } finally {
    delete own._read;
  }
  let taken = 0;
  for (const c of head) taken += c.length;
  if (taken > 0) await writeAllAsync(fd, head);

  // From here on Node's parser is behind the socket: unless it catches up, the connection ends with this request.
  const keepAlive = res.shouldKeepAlive;
  res.shouldKeepAlive = false;
  await spawnTurn();
  if (socket.destroyed || socket.readableEnded || spliceable(req, res)?.fd !== target.fd) {
    socket.destroy();
    throw new RequestAbortedError();
  }
  const receiver = spawn(binary, ["--receive", String(length - taken)], { stdio: [target.fd, fd, "pipe"] });
  let stderr = "";
  receiver.stderr!.on("data", (c: Buffer) => (stderr = (stderr + c.toString()).slice(-500)));
  const status = await new Promise<number | string | undefined>((resolve) => {
    receiver.once("error", () => resolve(undefined));
    receiver.once("close", (code, signal) => resolve(code ?? `killed by ${signal}`));
  });
  if ((status === RECEIVED || status === WRITE_FAILED) && catchUpParser(req, socket, length - taken)) {
    // The whole body was read: the connection goes on with the next request, after this one's answer.
    res.shouldKeepAlive = keepAlive;
    server._paused = false;
    socket.resume();
  }
  if (status === RECEIVED) {
    receives++;
    return;
  }
  if (status === undefined) {
    // Not started: nothing more was read, so Node's parser is still in step: it reads the rest.
    res.shouldKeepAlive = keepAlive;
    server._paused = false;
    return receiveInto(fd, req);
  }
  if (status === WRITE_FAILED) {
    const errno = Number(/write errno (\d+)/.exec(stderr)?.[1]);
    throw writeError(errno, stderr.trim());
  }
  socket.destroy();
  if (status === CLIENT_GONE) throw new RequestAbortedError();
  throw new Error(`receiving the upload failed (${typeof status === "number" ? `exit ${status}` : status}) ${stderr.trim()}`);
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

