// The hand-written encoding of process output events must be byte for byte what protobuf-es and connect-es write.
// First: protobuf-es picks its base64 encoder when it loads (envd/polyfill/base64.ts).
import "../../envd/polyfill/base64.js";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { ConnectResponseSchema, StartResponseSchema } from "../../gen/ts/process/process_pb.js";
import { binaryDataEnvelope, dataOf, jsonDataEnvelope, messageEnvelope } from "../../envd/process/event-wire.js";

function envelope(data: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + data.length);
  out.writeUInt32BE(data.length, 1);
  out.set(data, 5);
  return out;
}

const KINDS = ["stdout", "stderr", "pty"] as const;
// Around every varint length boundary of the three nested lengths.
const SIZES = [0, 1, 2, 117, 118, 122, 127, 128, 129, 300, 16370, 16380, 16383, 16384, 65536, 2_097_140, 2_097_152];

describe("process event wire encoding", () => {
  it("binary and JSON data events equal protobuf-es's and connect-es's encoding", () => {
    for (const kind of KINDS) {
      for (const size of SIZES) {
        const data = randomBytes(size);
        const init = { event: { event: { case: "data" as const, value: { output: { case: kind, value: data } } } } };
        for (const schema of [StartResponseSchema, ConnectResponseSchema]) {
          const message = create(schema, init);
          expect(binaryDataEnvelope(kind, data).equals(envelope(toBinary(schema, message))), `${kind} ${size} binary`).toBe(true);
          const json = Buffer.from(toJsonString(schema, message));
          expect(jsonDataEnvelope(kind, data).equals(envelope(json)), `${kind} ${size} JSON`).toBe(true);
        }
        const found = dataOf(init);
        expect(found?.kind).toBe(kind);
        expect(found?.data).toBe(data);
      }
    }
  });

  it("writes into the buffer it is given (a pooled one) and leaves other events to protobuf-es", () => {
    const data = randomBytes(1000);
    const backing = Buffer.alloc(4096, 0xee);
    const view = binaryDataEnvelope("stderr", data, (n) => backing.subarray(0, n));
    expect(view.buffer).toBe(backing.buffer);
    expect(view.equals(binaryDataEnvelope("stderr", data))).toBe(true);
    const start = { event: { event: { case: "start" as const, value: { pid: 4242 } } } };
    expect(dataOf(start)).toBeUndefined();
    expect(messageEnvelope(StartResponseSchema, start, false).subarray(5).toString()).toBe('{"event":{"start":{"pid":4242}}}');
    expect(messageEnvelope(StartResponseSchema, start, true).equals(envelope(toBinary(StartResponseSchema, create(StartResponseSchema, start))))).toBe(true);
  });

  it("start, end and keepalive events equal protobuf-es's encoding (written by hand)", () => {
    const events: { case: "start" | "end" | "keepalive"; value: Record<string, unknown> }[] = [{ case: "keepalive", value: {} }];
    for (const pid of [0, 1, 127, 128, 16383, 16384, 4_194_304, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1]) events.push({ case: "start", value: { pid } });
    for (const exitCode of [0, 1, -1, 2, 63, 64, -64, -65, 127, 128, 255, 8191, -8193, 2 ** 31 - 1, -(2 ** 31)]) {
      for (const exited of [true, false]) {
        for (const status of ["", "exit status 1", "signal: killed", 'quote " back\\slash \n tab\t \u0001 é 🙂 ' + "x".repeat(200)]) {
          for (const error of [undefined, "", "spawn failed: \u0000 ü"]) {
            events.push({ case: "end", value: { exitCode, exited, status, ...(error === undefined ? {} : { error }) } });
          }
        }
      }
    }
    for (const event of events) {
      const init = { event: { event: event as never } };
      for (const schema of [StartResponseSchema, ConnectResponseSchema]) {
        const message = create(schema, init);
        const label = `${event.case} ${JSON.stringify(event.value)}`;
        expect(messageEnvelope(schema, init, true).equals(envelope(toBinary(schema, message))), `${label} binary`).toBe(true);
        expect(messageEnvelope(schema, init, false).equals(envelope(Buffer.from(toJsonString(schema, message)))), `${label} JSON`).toBe(true);
      }
    }
  });
});
