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
  const { buf, offset } = eventFrame(EVENT_DATA_TAG, 1 + varintSize(size) + size, alloc);
  buf[offset] = OUTPUT_TAG[kind];
  buf.set(data, writeVarint(buf, offset + 1, size));
  return buf;
}

/**
 * An enveloped StartResponse / ConnectResponse whose ProcessEvent holds one
 * event (`eventTag`: its oneof field as a length-delimited tag) of
 * `innerSize` bytes: the buffer, with everything written but those bytes,
 * which go at `offset`.
 */
function eventFrame(eventTag: number, innerSize: number, alloc: Alloc = Buffer.allocUnsafe): { buf: Buffer; offset: number } {
  const event = 1 + varintSize(innerSize) + innerSize;
  const message = 1 + varintSize(event) + event;
  const buf = alloc(ENVELOPE_HEADER + message);
  buf[0] = 0;
  buf.writeUInt32BE(message, 1);
  let o = ENVELOPE_HEADER;
  buf[o++] = RESPONSE_EVENT_TAG;
  o = writeVarint(buf, o, event);
  buf[o++] = eventTag;
  return { buf, offset: writeVarint(buf, o, innerSize) };
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

/** A field of StartEvent or EndEvent: its JSON name, its tag byte and how it is written. */
type Field = { name: string; tag: number; kind: "uint" | "sint" | "bool" | "string" | "optional string" };

/**
 * ProcessEvent's start (= 1), end (= 3) and keepalive (= 4) events: their
 * length-delimited tags and their fields in field-number order. StartEvent:
 * pid = 1; EndEvent: exit_code = 1 (sint32), exited = 2, status = 3,
 * optional error = 4.
 */
const EVENTS: Record<"start" | "end" | "keepalive", { tag: number; fields: Field[] }> = {
  start: { tag: 0x0a, fields: [{ name: "pid", tag: 0x08, kind: "uint" }] },
  end: {
    tag: 0x1a,
    fields: [
      { name: "exitCode", tag: 0x08, kind: "sint" },
      { name: "exited", tag: 0x10, kind: "bool" },
      { name: "status", tag: 0x1a, kind: "string" },
      { name: "error", tag: 0x22, kind: "optional string" },
    ],
  },
  keepalive: { tag: 0x22, fields: [] },
};

/** The fields protobuf-es writes, in order: proto3 leaves default values out, an optional field whenever it is set. */
function present(fields: Field[], v: Record<string, unknown>): Field[] {
  return fields.filter((f) => (f.kind === "optional string" ? v[f.name] !== undefined : Boolean(v[f.name])));
}

/** A field's value on the wire: a varint, or the bytes of a string. */
function wireValue(f: Field, x: unknown): number | Buffer {
  if (f.kind === "uint") return x as number;
  if (f.kind === "sint") return (((x as number) << 1) ^ ((x as number) >> 31)) >>> 0; // zigzag
  if (f.kind === "bool") return 1;
  return Buffer.from(x as string, "utf8");
}

/**
 * A start, end or keepalive event, enveloped, byte for byte what protobuf-es
 * writes in binary and in JSON (StartResponse and ConnectResponse are both
 * `{ ProcessEvent event = 1; }`); undefined for any other message (or one
 * already made by protobuf-es).
 */
function eventEnvelope(init: ResponseInit, binary: boolean): Buffer | undefined {
  const event = init.event?.event;
  if (!event || init.event?.$typeName !== undefined || !event.case || !Object.hasOwn(EVENTS, event.case)) return undefined;
  const c = event.case as keyof typeof EVENTS;
  const v = event.value as Record<string, unknown>;
  if (v.$typeName !== undefined) return undefined;
  const fields = present(EVENTS[c].fields, v);
  if (!binary) {
    const body: Record<string, unknown> = {};
    for (const f of fields) body[f.name] = v[f.name];
    return envelope(0, Buffer.from(JSON.stringify({ event: { [c]: body } }), "utf8"));
  }
  const values = fields.map((f) => wireValue(f, v[f.name]));
  let size = 0;
  for (const x of values) size += 1 + (typeof x === "number" ? varintSize(x) : varintSize(x.length) + x.length);
  const { buf, offset } = eventFrame(EVENTS[c].tag, size);
  let o = offset;
  fields.forEach((f, i) => {
    const x = values[i]!;
    buf[o++] = f.tag;
    if (typeof x === "number") o = writeVarint(buf, o, x);
    else {
      o = writeVarint(buf, o, x.length);
      buf.set(x, o);
      o += x.length;
    }
  });
  return buf;
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
