import { create, toBinary, toJsonString, type MessageInitShape } from "@bufbuild/protobuf";
import type { ConnectResponseSchema, StartResponseSchema } from "../../gen/ts/process/process_pb.js";
import type { OutputKind } from "./handler/process-handle.js";

/**
 * Connect envelopes of StartResponse / ConnectResponse messages (both are
 * `{ ProcessEvent event = 1; }`), written by hand for the hot case, output
 * data, byte for byte what protobuf-es and connect-es produce:
 * - binary: the envelope header and the few tag/length bytes, then the
 *   output (no protobuf writer, one copy instead of three);
 * - JSON: `{"event":{"data":{"stdout":"<base64>"}}}` in one buffer.
 * The start, end and keepalive events, one of each on every command, are
 * written by hand too (`eventEnvelope`): protobuf-es's reflective create and
 * encode of them was a measurable share of envd's CPU per command. Anything
 * else goes through protobuf-es.
 */

type ResponseSchema = typeof StartResponseSchema | typeof ConnectResponseSchema;
export type ResponseInit = MessageInitShape<typeof StartResponseSchema>;

const ENVELOPE_HEADER = 5;
/** Returns a buffer of exactly `size` bytes (e.g. a view of a pooled one). */
export type Alloc = (size: number) => Buffer;
/** DataEvent's `oneof output` field numbers, as length-delimited tags. */
const OUTPUT_TAG: Record<OutputKind, number> = { stdout: 0x0a, stderr: 0x12, pty: 0x1a };
/** StartResponse.event = 1 and ProcessEvent.data = 2, both length-delimited. */
const RESPONSE_EVENT_TAG = 0x0a;
const EVENT_DATA_TAG = 0x12;

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function writeVarint(buf: Buffer, offset: number, n: number): number {
  while (n >= 0x80) {
    buf[offset++] = (n & 0x7f) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[offset++] = n;
  return offset;
}

function envelope(flags: number, data: Uint8Array): Buffer {
  const buf = Buffer.allocUnsafe(ENVELOPE_HEADER + data.length);
  buf[0] = flags;
  buf.writeUInt32BE(data.length, 1);
  buf.set(data, ENVELOPE_HEADER);
  return buf;
}

/**
 * A data event in the binary format, enveloped, in one buffer: the envelope
 * header and the few tag and length bytes, then `data` (one copy: written
 * as two pieces, the prefix would travel as an HTTP chunk of its own, which
 * costs the client more than the copy costs here).
 */
export function binaryDataEnvelope(kind: OutputKind, data: Uint8Array, alloc: Alloc = Buffer.allocUnsafe): Buffer {
  const size = data.length;
  const output = 1 + varintSize(size) + size;
  const event = 1 + varintSize(output) + output;
  const message = 1 + varintSize(event) + event;
  const prefix = alloc(ENVELOPE_HEADER + message);
  prefix[0] = 0;
  prefix.writeUInt32BE(message, 1);
  let o = ENVELOPE_HEADER;
  prefix[o++] = RESPONSE_EVENT_TAG;
  o = writeVarint(prefix, o, event);
  prefix[o++] = EVENT_DATA_TAG;
  o = writeVarint(prefix, o, output);
  prefix[o++] = OUTPUT_TAG[kind];
  o = writeVarint(prefix, o, size);
  prefix.set(data, o);
  return prefix;
}

/** A data event in the JSON format, enveloped, in one buffer. */
export function jsonDataEnvelope(kind: OutputKind, data: Uint8Array, alloc: Alloc = Buffer.allocUnsafe): Buffer {
  const head = `{"event":{"data":{"${kind}":"`;
  const tail = `"}}}`;
  const b64 = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64");
  const size = head.length + b64.length + tail.length;
  const buf = alloc(ENVELOPE_HEADER + size);
  buf[0] = 0;
  buf.writeUInt32BE(size, 1);
  let o = ENVELOPE_HEADER;
  o += buf.write(head, o, "latin1");
  o += buf.write(b64, o, "latin1");
  buf.write(tail, o, "latin1");
  return buf;
}

/** ProcessEvent's oneof field numbers as length-delimited tags: start = 1, end = 3, keepalive = 4. */
const EVENT_TAG = { start: 0x0a, end: 0x1a, keepalive: 0x22 } as const;

/** A varint field (tag byte, value) into `out`. */
function pushVarint(out: number[], tag: number, n: number): void {
  out.push(tag);
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
}

/** A length-delimited field (tag byte, length, bytes) into `out`. */
function pushBytes(out: number[], tag: number, bytes: ArrayLike<number>): void {
  pushVarint(out, tag, bytes.length);
  for (let i = 0; i < bytes.length; i++) out.push(bytes[i]!);
}

/** The fields of a ProcessEvent.EndEvent as protobuf-es writes them (proto3: defaults left out; `error` is optional). */
function endEventBytes(end: { exitCode?: number; exited?: boolean; status?: string; error?: string }): number[] {
  const out: number[] = [];
  const code = end.exitCode ?? 0;
  if (code !== 0) pushVarint(out, 0x08, ((code << 1) ^ (code >> 31)) >>> 0); // sint32: zigzag
  if (end.exited) out.push(0x10, 1);
  if (end.status) pushBytes(out, 0x1a, Buffer.from(end.status, "utf8"));
  if (end.error !== undefined) pushBytes(out, 0x22, Buffer.from(end.error, "utf8"));
  return out;
}

/**
 * A start, end or keepalive event, enveloped, byte for byte what protobuf-es
 * writes (StartResponse and ConnectResponse are both `{ ProcessEvent event = 1; }`);
 * undefined for any other message.
 */
function eventEnvelope(init: ResponseInit, binary: boolean): Buffer | undefined {
  const event = init.event?.event;
  if (!event || init.event?.$typeName !== undefined) return undefined;
  const c = event.case;
  if (c !== "start" && c !== "end" && c !== "keepalive") return undefined;
  const v = event.value as Record<string, unknown>;
  if (v.$typeName !== undefined) return undefined;
  if (!binary) {
    let body: unknown = {};
    if (c === "start") body = v.pid ? { pid: v.pid } : {};
    else if (c === "end") {
      const e = v as { exitCode?: number; exited?: boolean; status?: string; error?: string };
      body = {
        ...(e.exitCode ? { exitCode: e.exitCode } : {}),
        ...(e.exited ? { exited: true } : {}),
        ...(e.status ? { status: e.status } : {}),
        ...(e.error !== undefined ? { error: e.error } : {}),
      };
    }
    return envelope(0, Buffer.from(JSON.stringify({ event: { [c]: body } }), "utf8"));
  }
  const inner: number[] = [];
  if (c === "start" && v.pid) pushVarint(inner, 0x08, v.pid as number);
  else if (c === "end") inner.push(...endEventBytes(v));
  const processEvent: number[] = [];
  pushBytes(processEvent, EVENT_TAG[c], inner);
  const message: number[] = [];
  pushBytes(message, RESPONSE_EVENT_TAG, processEvent);
  return envelope(0, Uint8Array.from(message));
}

/** Any response message, enveloped: start, end and keepalive events by hand, anything else through protobuf-es. */
export function messageEnvelope(schema: ResponseSchema, init: ResponseInit, binary: boolean): Buffer {
  const fast = eventEnvelope(init, binary);
  if (fast) return fast;
  const message = create(schema, init);
  const data = binary ? toBinary(schema, message) : Buffer.from(toJsonString(schema, message), "utf8");
  return envelope(0, data);
}

/** The end-of-stream envelope (flag 0b10) around connect-es's end-stream JSON. */
export function endStreamEnvelope(json: Uint8Array): Buffer {
  return envelope(0b10, json);
}

/** The data event carried by a response init, if that is what it is. */
export function dataOf(init: ResponseInit): { kind: OutputKind; data: Uint8Array } | undefined {
  const event = init.event?.event;
  if (event?.case !== "data") return undefined;
  const output = event.value.output;
  if (!output?.case || !(output.value instanceof Uint8Array)) return undefined;
  return { kind: output.case, data: output.value };
}
