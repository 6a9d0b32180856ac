import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from "@connectrpc/connect/protocol";

/**
 * Where connect-es answers differently from connect-go (E2B's envd), made
 * to answer as connect-go does:
 * - a request message that is not valid protobuf is `invalid_argument`
 *   (connect-es says `internal`, "parse binary: …"), in every protocol:
 *   the Connect unary error body, the Connect end-stream message, the gRPC
 *   trailers and the gRPC-web trailer frame;
 * - a 405 carries `Allow` and a 415 `Accept-Post` (connect-es sends neither),
 *   with a JSON body that says what to send instead.
 */
export function answerAsConnectGo(handler: UniversalHandler): UniversalHandler {
  const wrapped = async (req: UniversalServerRequest) => fix(handler, await handler(req), req.header.get("content-type"));
  return Object.assign(wrapped, handler);
}

const PARSE_ERROR = "parse binary: ";
const GRPC_INTERNAL = "13";
const GRPC_INVALID_ARGUMENT = "3";
const END_STREAM_FLAG = 0b10;
const GRPC_WEB_TRAILER_FLAG = 0b1000_0000;

/** The content types connect-go accepts for a method, sorted, as its Accept-Post lists them. */
function acceptPost(handler: UniversalHandler): string {
  const streaming = handler.method.methodKind !== "unary";
  const connect = streaming ? ["application/connect+json", "application/connect+proto"] : ["application/json", "application/proto"];
  const grpc = ["application/grpc", "application/grpc+json", "application/grpc+proto"];
  const grpcWeb = ["application/grpc-web", "application/grpc-web+json", "application/grpc-web+proto"];
  return [...connect, ...grpc, ...grpcWeb].sort().join(", ");
}

function bytesBody(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  return (async function* () {
    yield bytes;
  })();
}

function jsonAnswer(status: number, headers: Record<string, string>, message: string): UniversalServerResponse {
  const body = new TextEncoder().encode(JSON.stringify({ code: status, message }));
  return {
    status,
    header: new Headers({ ...headers, "content-type": "application/json", "content-length": String(body.length) }),
    body: bytesBody(body),
  };
}

async function fix(handler: UniversalHandler, res: UniversalServerResponse, requestType: string | null): Promise<UniversalServerResponse> {
  const path = handler.requestPath;
  if (res.status === 405) {
    const allow = handler.allowedMethods.join(", ");
    return jsonAnswer(405, { allow }, `this HTTP method is not allowed on ${path}: use ${allow}`);
  }
  if (res.status === 415) {
    const accepted = acceptPost(handler);
    const given = requestType ? `Content-Type '${requestType}'` : "a request without Content-Type";
    return jsonAnswer(415, { "accept-post": accepted }, `${given} is not served on ${path}: send one of ${accepted}`);
  }
  // Only a binary (protobuf) message can fail to parse as "parse binary": JSON requests (the SDKs')
  // are answered untouched, their streams without an extra hop per chunk.
  if (!res.body || /json/i.test(requestType ?? "")) return res;
  const header = new Headers(res.header);
  const type = header.get("content-type") ?? "";
  const hint = `: the request is not a valid ${handler.method.input.typeName} in the protobuf binary format; send a well-formed message`;
  if (res.status === 500 && type.startsWith("application/json")) return fixUnary(res, res.body, header, hint);
  if (type.startsWith("application/connect+")) return { ...res, body: mapChunks(res.body, (c) => fixEndStream(c, hint)) };
  if (type.startsWith("application/grpc-web")) return { ...res, body: mapChunks(res.body, (c) => fixGrpcWebTrailer(c, hint)) };
  if (type.startsWith("application/grpc") && res.trailer instanceof Headers) {
    const trailer = res.trailer;
    return { ...res, body: mapChunks(res.body, (c) => c, () => fixGrpcTrailer(trailer, hint)) };
  }
  return res;
}

/** True (and the error rewritten) when a Connect error `{code, message}` is a parse failure reported as internal. */
function fixConnectError(error: unknown, hint: string): boolean {
  const e = error as { code?: unknown; message?: unknown } | null | undefined;
  if (!e || e.code !== "internal" || typeof e.message !== "string" || !e.message.startsWith(PARSE_ERROR)) return false;
  e.code = "invalid_argument";
  e.message += hint;
  return true;
}

function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"));
  } catch {
    return undefined;
  }
}

/** Connect unary: the error is the (small) JSON body of a 500. */
async function fixUnary(res: UniversalServerResponse, body: AsyncIterable<Uint8Array>, header: Headers, hint: string): Promise<UniversalServerResponse> {
  const chunks: Uint8Array[] = [];
  for await (const c of body) chunks.push(c);
  const bytes = Buffer.concat(chunks);
  const error = parseJson(bytes);
  if (!fixConnectError(error, hint)) return { ...res, header, body: bytesBody(bytes) };
  const fixed = Buffer.from(JSON.stringify(error));
  header.set("content-length", String(fixed.length));
  return { ...res, status: 400, header, body: bytesBody(fixed) };
}

/** One enveloped message (joined: connect-es yields one per chunk), or undefined when the chunk is not exactly one. */
function envelope(chunk: Uint8Array): { flags: number; data: Uint8Array } | undefined {
  if (chunk.length < 5) return undefined;
  const length = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).readUInt32BE(1);
  if (chunk.length !== 5 + length) return undefined;
  return { flags: chunk[0]!, data: chunk.subarray(5) };
}

function encodeEnvelope(flags: number, data: Uint8Array): Uint8Array {
  const out = Buffer.alloc(5 + data.length);
  out[0] = flags;
  out.writeUInt32BE(data.length, 1);
  out.set(data, 5);
  return out;
}

/** Connect streams: the error is in the end-stream message (`{"error": {code, message}}`). */
function fixEndStream(chunk: Uint8Array, hint: string): Uint8Array {
  if ((chunk[0]! & END_STREAM_FLAG) === 0) return chunk;
  const env = envelope(chunk);
  const end = env && (parseJson(env.data) as { error?: unknown } | undefined);
  if (!env || !end || !fixConnectError(end.error, hint)) return chunk;
  return encodeEnvelope(env.flags, Buffer.from(JSON.stringify(end)));
}

/** The fixed (percent-encoded) grpc-message when status and message are a parse failure reported as internal. */
function fixedGrpcMessage(status: string | null, message: string | null, hint: string): string | undefined {
  if (status !== GRPC_INTERNAL || message === null) return undefined;
  let text: string;
  try {
    text = decodeURIComponent(message);
  } catch {
    return undefined;
  }
  return text.startsWith(PARSE_ERROR) ? encodeURIComponent(text + hint) : undefined;
}

/** gRPC: the status is in the trailers, set once the body has ended. */
function fixGrpcTrailer(trailer: Headers, hint: string): void {
  const message = fixedGrpcMessage(trailer.get("grpc-status"), trailer.get("grpc-message"), hint);
  if (message === undefined) return;
  trailer.set("grpc-status", GRPC_INVALID_ARGUMENT);
  trailer.set("grpc-message", message);
}

/** gRPC-web: the trailers are the body's last frame, `name: value\r\n` lines. */
function fixGrpcWebTrailer(chunk: Uint8Array, hint: string): Uint8Array {
  if ((chunk[0]! & GRPC_WEB_TRAILER_FLAG) === 0) return chunk;
  const env = envelope(chunk);
  if (!env) return chunk;
  const lines = Buffer.from(env.data).toString("latin1").split("\r\n");
  const value = (name: string) => {
    const line = lines.find((l) => l.toLowerCase().startsWith(`${name}:`));
    return line === undefined ? null : line.slice(name.length + 1).trim();
  };
  const message = fixedGrpcMessage(value("grpc-status"), value("grpc-message"), hint);
  if (message === undefined) return chunk;
  const fixed = lines
    .map((l) => {
      const name = l.slice(0, l.indexOf(":")).toLowerCase();
      if (name === "grpc-status") return `grpc-status: ${GRPC_INVALID_ARGUMENT}`;
      return name === "grpc-message" ? `grpc-message: ${message}` : l;
    })
    .join("\r\n");
  return encodeEnvelope(env.flags, Buffer.from(fixed, "latin1"));
}

/**
 * `body` with `fn` applied to each chunk and `atEnd` run once it is exhausted;
 * throw/return go straight to the source (write errors reach the handler).
 */
function mapChunks(body: AsyncIterable<Uint8Array>, fn: (chunk: Uint8Array) => Uint8Array, atEnd?: () => void): AsyncIterable<Uint8Array> {
  return {
    [Symbol.asyncIterator]() {
      const it = body[Symbol.asyncIterator]();
      return {
        next: () =>
          it.next().then((r) => {
            if (r.done) {
              atEnd?.();
              return r;
            }
            return { done: false, value: fn(r.value) };
          }),
        throw: (e?: unknown) => (it.throw ? it.throw(e) : Promise.reject(e)),
        return: (v?: unknown) => (it.return ? it.return(v) : Promise.resolve({ done: true as const, value: v })),
      };
    },
  };
}
