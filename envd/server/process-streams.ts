import { fromBinary, fromJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextValues, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { createEndStreamSerialization, parseTimeout } from "@connectrpc/connect/protocol-connect";
import type { IncomingMessage, ServerResponse } from "node:http";
import { ConnectRequestSchema, Process, StartRequestSchema, ConnectResponseSchema, StartResponseSchema } from "../../gen/ts/process/process_pb.js";
import { USER_KEY, userFromAuthorization } from "../auth/user.js";
import { headersFromParsed } from "../polyfill/headers.js";
import type { EnvdContext } from "../context.js";
import { binaryDataEnvelope, dataOf, endStreamEnvelope, jsonDataEnvelope, messageEnvelope, type ResponseInit } from "../process/event-wire.js";

/** Serves a request whose body was already read (`body`) the ordinary way, through connect-es. */
export type Fallback = (req: IncomingMessage, res: ServerResponse, body: Uint8Array) => void;

const START = `/${Process.typeName}/${Process.method.start.name}`;
const CONNECT = `/${Process.typeName}/${Process.method.connect.name}`;
const TYPES = { "application/connect+proto": true, "application/connect+json": false } as const;
const endStream = createEndStreamSerialization({});
/**
 * Why a call's signal is aborted when it ends normally or its response
 * closes: given as the reason so that no DOMException (and its stack) is
 * made for every call.
 */
const CALL_DONE = new Error("the call ended");
const RESPONSE_CLOSED = new Error("the response closed");

/**
 * process.Process Start and Connect in the Connect streaming protocol over
 * HTTP/1.1 (what the E2B SDKs speak, JSON or binary, uncompressed), served
 * without connect-es's per-message pipeline: output events are encoded by
 * hand (process/event-wire.ts), one HTTP chunk each, and each write awaits
 * `drain` when the socket is full (back-pressure reaches the process
 * through its multiplexer).
 *
 * Only a well-formed request takes this path: anything connect-es would
 * answer with an error (a compressed or malformed request, a bad timeout,
 * an unknown user) is handed to connect-es with the body already read, so
 * every error answer stays connect-es's (and connect-go's). The answer
 * itself is the same bytes connect-es writes: 200, the stream's content
 * type, the messages, and the end-stream message with any error.
 *
 * Returns false for requests it does not take (the caller serves them).
 */
export function createProcessStreams(ctx: EnvdContext, impl: ServiceImpl<typeof Process>, readMaxBytes: number, fallback: Fallback) {
  return (req: IncomingMessage, res: ServerResponse): boolean => {
    const path = (req.url ?? "").split("?", 1)[0];
    const method = path === START ? "start" : path === CONNECT ? "connect" : undefined;
    const type = req.headers["content-type"] ?? "";
    if (!method || req.method !== "POST" || req.httpVersionMajor !== 1 || !Object.hasOwn(TYPES, type)) return false;
    const encoding = req.headers["connect-content-encoding"];
    if (encoding !== undefined && encoding !== "identity") return false;
    // A body announced over the limit is connect-es's to refuse (it reads no more of it than needed).
    if (Number(req.headers["content-length"] ?? 0) > readMaxBytes) return false;
    const binary = TYPES[type as keyof typeof TYPES];
    readBody(req, readMaxBytes).then(
      (body) => {
        if (!body.complete) return fallback(req, res, body.bytes); // over the limit: connect-es refuses it by its header
        const bytes = body.bytes;
        const call = prepare(ctx, req, res, method, binary, bytes);
        if (!call) return fallback(req, res, bytes);
        void serve(res, call, impl, binary);
      },
      () => res.destroy(), // the client went away mid-request
    );
    return true;
  };
}

/**
 * The whole (small) request body; past `limit` bytes only its first five
 * (the envelope header, whose length connect-es checks) and `complete` false.
 */
function readBody(req: IncomingMessage, limit: number): Promise<{ bytes: Uint8Array; complete: boolean }> {
  return new Promise((resolve, reject) => {
    let chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size <= limit) chunks.push(c);
      else if (chunks.length !== 1 || chunks[0]!.length < 5) chunks = [Buffer.concat([...chunks, c]).subarray(0, 5)];
    });
    req.once("end", () => {
      const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      resolve({ bytes, complete: size <= limit });
    });
    req.once("error", reject);
    req.once("close", () => {
      if (!req.complete) reject(new Error("aborted"));
    });
  });
}

interface Call {
  method: "start" | "connect";
  message: unknown;
  hctx: HandlerContext & { abort(reason?: unknown): void };
}

/** Parses the one request message and builds the handler context; undefined for anything unusual. */
function prepare(ctx: EnvdContext, req: IncomingMessage, res: ServerResponse, method: Call["method"], binary: boolean, body: Uint8Array): Call | undefined {
  if (body.length < 5 || body[0] !== 0) return undefined;
  const length = Buffer.from(body.buffer, body.byteOffset, body.byteLength).readUInt32BE(1);
  if (body.length !== 5 + length) return undefined;
  const data = body.subarray(5);
  const timeout = parseTimeout(req.headers["connect-timeout-ms"] as string | undefined ?? null, Number.MAX_SAFE_INTEGER);
  if (timeout.error) return undefined;
  const schema = method === "start" ? StartRequestSchema : ConnectRequestSchema;
  let message: unknown;
  const values = createContextValues();
  const header = headersFromParsed(req.rawHeaders);
  try {
    message = binary
      ? fromBinary(schema, data)
      : fromJsonString(schema, Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8"), { ignoreUnknownFields: true });
    values.set(USER_KEY, userFromAuthorization(ctx, header.get("authorization")));
  } catch {
    return undefined;
  }
  const hctx = callContext(method, timeout.timeoutMs, header, values, binary, `http://${req.headers.host ?? "localhost"}${req.url ?? ""}`);
  res.once("close", () => hctx.abort(RESPONSE_CLOSED));
  return { method, message, hctx };
}

/** How long the headers wait for the first event before they are sent alone. */
const HEADERS_ALONE_AFTER_MS = 2;

function isEnd(init: ResponseInit): boolean {
  return (init as { event?: { event?: { case?: string } } }).event?.event?.case === "end";
}

/**
 * The handler context connect-es's createHandlerContext would make, with
 * one AbortController instead of three (its own, the deadline's, the
 * request's, linked by listeners) and the request headers not copied
 * again: per call, this is a measurable share of envd's CPU per command.
 * Its signal aborts when the call ends, the response closes, or the
 * deadline (Connect-Timeout-Ms) passes, with connect-es's reason for that.
 */
function callContext(
  method: Call["method"],
  timeoutMs: number | undefined,
  requestHeader: Headers,
  values: ReturnType<typeof createContextValues>,
  binary: boolean,
  url: string,
): Call["hctx"] {
  const controller = new AbortController();
  const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  const timer =
    timeoutMs === undefined
      ? undefined
      : setTimeout(() => controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded)), Math.max(0, timeoutMs));
  return {
    service: Process,
    method: Process.method[method],
    protocolName: "connect",
    requestMethod: "POST",
    url,
    signal: controller.signal,
    timeoutMs: () => (deadline === undefined ? undefined : deadline - Date.now()),
    requestHeader,
    responseHeader: new Headers({ "content-type": binary ? "application/connect+proto" : "application/connect+json" }),
    responseTrailer: new Headers(),
    values,
    abort(reason?: unknown) {
      clearTimeout(timer);
      if (!controller.signal.aborted) controller.abort(reason);
    },
  } as Call["hctx"];
}

/**
 * Bytes a stream may have handed to its response that the socket has not
 * taken yet. An event (up to 64 KiB) is above the socket's own high-water
 * mark, so waiting for `drain` after every write would take turns with the
 * socket; a small window keeps the socket fed and memory bounded.
 */
const WRITE_WINDOW_BYTES = 512 * 1024;

/** Writes; resolves when the socket can take more (at once, or after `drain`), false once the client is gone. */
function write(res: ServerResponse, chunk: Buffer, written?: () => void): Promise<boolean> | boolean {
  if (res.destroyed) return false;
  res.write(chunk, written && ((err) => !err && written()));
  if (res.writableLength < WRITE_WINDOW_BYTES) return true;
  return new Promise((resolve) => {
    const done = (v: boolean) => () => {
      res.off("drain", onDrain);
      res.off("close", onClose);
      resolve(v);
    };
    const onDrain = done(true);
    const onClose = done(false);
    res.once("drain", onDrain);
    res.once("close", onClose);
  });
}

/**
 * Buffers for large data events, reused once the socket has taken their
 * bytes: a busy stream allocates a few, not one per event (fresh 64 KiB
 * buffers cost more in allocation and GC than the copy into them).
 */
class BufferPool {
  private static readonly SIZE = 96 * 1024;
  private static readonly KEEP = 8;
  /** Smaller events come from Node's shared slab: a stream that only ever sends a line holds no pool. */
  private static readonly MIN = 16 * 1024;
  private readonly free: Buffer[] = [];

  take(size: number): Buffer {
    if (size < BufferPool.MIN) return Buffer.allocUnsafe(size);
    if (size > BufferPool.SIZE) return Buffer.allocUnsafeSlow(size);
    return this.free.pop() ?? Buffer.allocUnsafeSlow(BufferPool.SIZE);
  }

  give(buf: Buffer): void {
    if (buf.length === BufferPool.SIZE && this.free.length < BufferPool.KEEP) this.free.push(buf);
  }
}

async function serve(res: ServerResponse, call: Call, impl: ServiceImpl<typeof Process>, binary: boolean): Promise<void> {
  const { hctx } = call;
  const schema = call.method === "start" ? StartResponseSchema : ConnectResponseSchema;
  const headers: Record<string, string> = {};
  hctx.responseHeader.forEach((v, k) => (headers[k] = v));
  res.writeHead(200, headers);
  // The headers go with the first event (one write), or alone when it is not ready soon (a spawn
  // waiting its turn): a client then sees its call accepted at once, whatever the queue.
  let wrote = false;
  const flush = setTimeout(() => {
    if (!wrote && !res.destroyed) res.flushHeaders();
  }, HEADERS_ALONE_AFTER_MS);
  const events = (call.method === "start"
    ? impl.start(call.message as never, hctx)
    : impl.connect(call.message as never, hctx)) as AsyncIterable<ResponseInit>;
  const pool = new BufferPool();
  let error: ConnectError | undefined;
  try {
    for await (const init of events) {
      wrote = true;
      clearTimeout(flush);
      // The end event and the end of the stream leave in one write (uncorked after res.end below).
      if (isEnd(init)) res.cork();
      const out = dataOf(init);
      let chunk: Buffer;
      let backing: Buffer | undefined;
      if (!out) chunk = messageEnvelope(schema, init, binary);
      else {
        const alloc = (size: number) => (backing = pool.take(size)).subarray(0, size);
        chunk = binary ? binaryDataEnvelope(out.kind, out.data, alloc) : jsonDataEnvelope(out.kind, out.data, alloc);
      }
      const ready = write(res, chunk, backing && (() => pool.give(backing!)));
      if (!(ready === true || (await ready))) return; // the client went away: the loop's return closes the generator
    }
  } catch (err) {
    if (res.destroyed) return;
    error = err instanceof ConnectError ? err : new ConnectError("internal error", Code.Internal, undefined, undefined, err);
  } finally {
    clearTimeout(flush);
    hctx.abort(error ?? CALL_DONE);
  }
  wrote = true;
  res.end(endStreamEnvelope(endStream.serialize({ metadata: hctx.responseTrailer, error })));
  while (res.writableCorked > 0) res.uncork();
}
