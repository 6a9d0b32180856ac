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
 * Every other event (start, end, keepalive) goes through protobuf-es.
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

/** Any response message, enveloped, through protobuf-es (start, end, keepalive events). */
export function messageEnvelope(schema: ResponseSchema, init: ResponseInit, binary: boolean): Buffer {
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
