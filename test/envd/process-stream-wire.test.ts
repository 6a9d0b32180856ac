// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// Start and Connect over HTTP/1.1 Connect take envd's own stream writer (envd/server/process-streams.ts):
// its answers must be connect-es's, byte for byte, and large outputs must arrive whole, in order, with back-pressure.
import { create, fromBinary, fromJsonString, toBinary, toJsonString } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StartRequestSchema, StartResponseSchema } from "../../gen/ts/process/process_pb.js";
import { clients, startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { collect, sh } from "../helpers/process.js";

let envd: TestEnvd;
beforeAll(async () => {
  envd = await startTestEnvd();
});
afterAll(async () => {
  await envd?.close();
});

interface Raw {
  status: number;
  type: string | undefined;
  envelopes: { flags: number; data: Buffer }[];
}

/** POST /process.Process/Start with exactly this content type, the answer split into its envelopes. */
function rawStart(contentType: string, request: object | Buffer, headers: Record<string, string> = {}): Promise<Raw> {
  const binary = /proto/i.test(contentType);
  let body: Buffer;
  if (Buffer.isBuffer(request)) body = request;
  else {
    const message = create(StartRequestSchema, request);
    const data = binary ? toBinary(StartRequestSchema, message) : Buffer.from(toJsonString(StartRequestSchema, message));
    body = Buffer.alloc(5 + data.length);
    body.writeUInt32BE(data.length, 1);
    body.set(data, 5);
  }
  return new Promise((resolve, reject) => {
    const req = http.request(`${envd.url}/process.Process/Start`, { method: "POST", headers: { "content-type": contentType, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const all = Buffer.concat(chunks);
        const envelopes: Raw["envelopes"] = [];
        for (let o = 0; o < all.length; ) {
          const size = all.readUInt32BE(o + 1);
          envelopes.push({ flags: all[o]!, data: all.subarray(o + 5, o + 5 + size) });
          o += 5 + size;
        }
        resolve({ status: res.statusCode!, type: res.headers["content-type"], envelopes });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    // Chunked (no Content-Length), so envd learns a body's size only by reading it.
    req.write(body);
    req.end();
  });
}

/**
 * The answer without what differs from run to run: the start event (its pid) is left out and output data
 * is joined (how a pipe's output splits into reads varies); every other envelope is kept byte for byte.
 */
function comparable(r: Raw) {
  const binary = /proto/.test(r.type ?? "");
  const output: Record<string, string> = {};
  const others: [number, string][] = [];
  for (const e of r.envelopes) {
    const message = e.flags === 0 ? (binary ? fromBinary(StartResponseSchema, e.data) : fromJsonString(StartResponseSchema, e.data.toString())) : undefined;
    const event = message?.event?.event;
    if (event?.case === "start") continue;
    if (event?.case === "data" && event.value.output.case) {
      const kind = event.value.output.case;
      output[kind] = (output[kind] ?? "") + Buffer.from(event.value.output.value).toString("hex");
    } else others.push([e.flags, e.data.toString("hex")]);
  }
  return { status: r.status, type: r.type, output, others };
}

describe("envd's Connect stream writer", () => {
  // connect-es accepts `application/connect+JSON; charset=utf-8` and any letter case; envd's own writer takes
  // only the plain types, so the variants below are served by connect-es: the reference answer.
  const pairs = [
    ["application/connect+json", "application/connect+json; charset=utf-8"],
    ["application/connect+proto", "application/connect+Proto"],
  ] as const;

  it("answers output, exit and errors exactly as connect-es does, JSON and binary", async () => {
    // A message over envd's 64 MiB limit for one RPC message, sent without Content-Length.
    const huge = Buffer.alloc(5 + 65 * 1024 * 1024);
    huge.writeUInt32BE(huge.length - 5, 1);
    const cases: { request: object | Buffer; headers?: Record<string, string> }[] = [
      { request: huge },
      { request: Buffer.from([0, 0, 0, 0, 9, 1, 2]) },
      { request: sh("printf 'hello\\000world'; exit 3") },
      { request: sh("seq 1 40000; echo done >&2") },
      { request: { process: { cmd: "/bin/true", cwd: "/no/such/dir" } } },
      { request: sh("true"), headers: { authorization: `Basic ${Buffer.from("ghost:").toString("base64")}` } },
      { request: sh("true"), headers: { "connect-timeout-ms": "soon" } },
    ];
    for (const [fast, reference] of pairs) {
      for (const c of cases) {
        const [mine, theirs] = [await rawStart(fast, c.request, c.headers), await rawStart(reference, c.request, c.headers)];
        expect(mine.status).toBe(200);
        expect(mine.envelopes.at(-1)?.flags).toBe(0b10);
        expect(comparable(mine)).toEqual(comparable(theirs));
      }
    }
  });

  for (const protocol of ["connect-json", "connect-binary"] as const) {
    it(`${protocol}: a large output arrives whole and in order, stderr too`, async () => {
      const { process } = clients(envd.url, protocol);
      const expected = createHash("sha256");
      for (let i = 1; i <= 300000; i++) expected.update(`${i}\n`);
      const r = await collect(process.start(sh("seq 1 300000; seq 1 300000 >&2")));
      expect(createHash("sha256").update(r.stdout).digest("hex")).toBe(expected.copy().digest("hex"));
      expect(createHash("sha256").update(r.stderr).digest("hex")).toBe(expected.digest("hex"));
      expect(r.end?.exitCode).toBe(0);
    });
  }

  it("connect-binary: a reader that stops holds the process back; envd's memory stays flat", async () => {
    const { process } = clients(envd.url, "connect-binary");
    const total = 512 * 1024 * 1024;
    const it = process.start(sh(`head -c ${total} /dev/zero`))[Symbol.asyncIterator]();
    await it.next(); // start
    await it.next(); // one data event, then stop reading
    const before = globalThis.process.memoryUsage().rss;
    await new Promise((r) => setTimeout(r, 1000));
    const grown = globalThis.process.memoryUsage().rss - before;
    // Without back-pressure the 512 MiB would pile up in this process (envd runs in it).
    expect(grown).toBeLessThan(128 * 1024 * 1024);
    let bytes = 0;
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      const e = r.value.event?.event;
      if (e?.case === "data" && e.value.output.case === "stdout") bytes += e.value.output.value.length;
    }
    expect(bytes).toBeGreaterThan(total - 1024 * 1024);
  });
});
