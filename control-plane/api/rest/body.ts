import type { IncomingMessage } from "node:http";
import { HttpError } from "./errors.js";

/** Request bodies of this API are small JSON objects; anything bigger is refused. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Past this many bytes an oversized body is no longer drained for a clean 413: the connection is dropped. */
const DRAIN_LIMIT = 64 * 1024 * 1024;

/**
 * Reads a JSON request body (Content-Length or chunked, as the JS SDK sends
 * it). An empty body reads as `{}`; a body that is not a JSON object is a
 * 400, one over `limit` bytes a 413 (`secret`: its 400 never quotes the body). An oversized body is still read (and
 * dropped), so that the client gets to read the 413 instead of a reset.
 */
export async function readJsonObject(req: IncomingMessage, limit = MAX_BODY_BYTES, opts: { secret?: boolean } = {}): Promise<Record<string, unknown>> {
  const declared = Number(req.headers["content-length"] ?? NaN);
  if (declared > DRAIN_LIMIT) throw tooLarge(limit);
  if (req.readableEnded) return {};
  const { chunks, size } = await new Promise<{ chunks: Buffer[]; size: number }>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
      else if (size > DRAIN_LIMIT) {
        cleanup();
        req.destroy();
        reject(tooLarge(limit));
      }
    };
    const onEnd = () => {
      cleanup();
      if (size > limit) reject(tooLarge(limit));
      else resolve({ chunks, size });
    };
    const onError = (err: Error) => {
      cleanup();
      reject(new HttpError(400, `reading the request body failed: ${err.message}`));
    };
    const cleanup = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
  });
  const text = Buffer.concat(chunks, size).toString("utf8").trim();
  if (text === "") return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // A body that carries a secret: the parser's message may quote it, so only what to do is said.
    if (opts.secret) throw new HttpError(400, "invalid JSON body: send a JSON object (the parser's message is not shown: the body carries a secret)");
    throw new HttpError(400, `invalid JSON body: ${(err as Error).message}`);
  }
  if (value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new HttpError(400, `invalid JSON body: expected an object, got ${Array.isArray(value) ? "an array" : typeof value}`);
  }
  return value as Record<string, unknown>;
}

function tooLarge(limit: number): HttpError {
  return new HttpError(413, `request body is larger than ${limit} bytes`);
}

export function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === "object") return "an object";
  return String(v);
}

/**
 * Typed access to the fields of a request body: each getter returns
 * undefined when the field is absent (or null) and throws a 400 naming the
 * field when it has the wrong type or is out of range.
 */
export class Fields {
  constructor(private readonly body: Record<string, unknown>) {}

  private get(name: string): unknown {
    const v = this.body[name];
    return v === null ? undefined : v;
  }

  private bad(name: string, expected: string): never {
    throw new HttpError(400, `field '${name}' must be ${expected}, got ${describe(this.body[name])}`);
  }

  has(name: string): boolean {
    return this.get(name) !== undefined;
  }

  string(name: string): string | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== "string") this.bad(name, "a string");
    return v;
  }

  requiredString(name: string): string {
    const v = this.string(name);
    if (v === undefined || v === "") throw new HttpError(400, `field '${name}' is required`);
    return v;
  }

  bool(name: string): boolean | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== "boolean") this.bad(name, "a boolean");
    return v;
  }

  /** An integer in [min, max] (int32 unless told otherwise). */
  int(name: string, min = 0, max = 2 ** 31 - 1): number | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v)) this.bad(name, "an integer");
    if (v < min || v > max) throw new HttpError(400, `field '${name}' must be between ${min} and ${max}, got ${v}`);
    return v;
  }

  object(name: string): Record<string, unknown> | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== "object" || Array.isArray(v)) this.bad(name, "an object");
    return v as Record<string, unknown>;
  }

  /** An object whose values are all strings (metadata, envVars). */
  stringMap(name: string): Record<string, string> | undefined {
    const obj = this.object(name);
    if (!obj) return undefined;
    for (const [k, v] of Object.entries(obj)) {
      if (typeof v !== "string") throw new HttpError(400, `field '${name}.${k}' must be a string, got ${describe(v)}`);
    }
    return obj as Record<string, string>;
  }

  array(name: string): unknown[] | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (!Array.isArray(v)) this.bad(name, "an array");
    return v;
  }
}

/** A page size query parameter: 1 to 100, default 100 (E2B's paginationLimit). */
export function parseLimit(raw: string | null): number {
  if (raw === null || raw === "") return 100;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 100) throw new HttpError(400, `invalid limit '${raw}': expected an integer from 1 to 100`);
  return n;
}
