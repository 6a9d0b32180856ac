import type { IncomingMessage } from "node:http";
import { PassThrough, type Readable } from "node:stream";
import { HttpError } from "./common.js";

/**
 * Bytes of request body held between the socket and the file: the socket
 * keeps being read while a write to disk is under way, and the file's sink
 * gets many chunks per write (writev).
 */
export const BODY_BUFFER_BYTES = 1024 * 1024;

/** The client closed the connection before the request body was complete. */
export class RequestAbortedError extends Error {
  constructor() {
    super("the client closed the connection before the request body was complete");
    this.name = "RequestAbortedError";
  }
}

export interface DetachedBody {
  /** The request body; errors with RequestAbortedError when the client goes away. */
  stream: Readable;
  /** Stops reading into `stream` and discards the rest of the body, so a response can still be sent. */
  release(): void;
}

/**
 * The request body as a stream that can be destroyed freely: destroying it
 * (as `pipeline` does on any error) leaves the request and its socket alone,
 * so an error response can still be written. Back-pressure is kept.
 */
export function detachBody(req: IncomingMessage): DetachedBody {
  const stream = new PassThrough({ highWaterMark: BODY_BUFFER_BYTES });
  const onError = (err: Error) => stream.destroy(err);
  const onClose = () => {
    if (!req.complete) stream.destroy(new RequestAbortedError());
  };
  req.on("error", onError);
  req.once("close", onClose);
  req.pipe(stream);
  return {
    stream,
    release() {
      req.unpipe(stream);
      if (!req.complete && !req.destroyed) req.resume();
    },
  };
}

/**
 * The request's Content-Encoding: only identity and one layer of gzip are
 * understood; anything else is a 400.
 */
export function requestDecoding(header: string | undefined): "gzip" | undefined {
  if (!header) return undefined;
  const codings = header
    .split(",")
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== "" && c !== "identity");
  if (codings.length === 0) return undefined;
  if (codings.length === 1 && (codings[0] === "gzip" || codings[0] === "x-gzip")) return "gzip";
  throw new HttpError(400, `unsupported Content-Encoding '${header}', supported: [identity, gzip]`);
}

/**
 * Reads a small request body into memory, at most `limit` bytes (more → 413,
 * the rest is discarded so the response can still be sent).
 */
export function readSmallBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers["content-length"]);
    const tooLarge = () => new HttpError(413, `request body too large: at most ${limit} bytes are accepted`);
    if (Number.isFinite(declared) && declared > limit) {
      req.resume();
      reject(tooLarge());
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on("data", (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size > limit) {
        over = true;
        chunks.length = 0;
        reject(tooLarge());
        return;
      }
      chunks.push(chunk);
    });
    req.on("end", () => {
      if (!over) resolve(Buffer.concat(chunks));
    });
    req.on("error", reject);
    req.once("close", () => {
      if (!req.complete) reject(new RequestAbortedError());
    });
  });
}
