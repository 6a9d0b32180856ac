// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import http from "node:http";
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";

let envd: TestEnvd;
beforeAll(async () => {
  envd = await startTestEnvd();
});
afterAll(async () => {
  await envd?.close();
});

async function rpc(path: string, body: Uint8Array | string, contentType: string, headers: Record<string, string> = {}) {
  const res = await fetch(envd.url + path, {
    method: "POST",
    headers: { "content-type": contentType, "connect-protocol-version": "1", ...headers },
    body,
  });
  const raw = new Uint8Array(await res.arrayBuffer());
  return { status: res.status, type: res.headers.get("content-type"), headers: res.headers, raw, text: new TextDecoder().decode(raw) };
}

/** A gRPC call over h2c with a raw body; resolves with the trailers. */
function grpcCall(path: string, body: Uint8Array): Promise<{ trailers: http2.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(envd.url);
    session.on("error", reject);
    const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc+proto", te: "trailers" });
    let trailers: http2.IncomingHttpHeaders = {};
    req.on("trailers", (t) => (trailers = t));
    req.on("response", (h) => {
      // A trailers-only answer carries the status in the headers.
      if (h["grpc-status"] !== undefined) trailers = h;
    });
    req.on("data", () => undefined);
    req.on("end", () => {
      session.close();
      resolve({ trailers });
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** The payload of the last envelope of a gRPC-web or Connect streaming body. */
function lastFrame(raw: Uint8Array): Uint8Array {
  let off = 0;
  let last: Uint8Array = new Uint8Array();
  while (off + 5 <= raw.length) {
    const len = new DataView(raw.buffer, raw.byteOffset + off + 1, 4).getUint32(0);
    last = raw.subarray(off + 5, off + 5 + len);
    off += 5 + len;
  }
  return last;
}

/** A Connect streaming envelope: flags, 4-byte big-endian length, payload. */
function envelope(payload: Uint8Array, flags = 0): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, payload.length);
  out.set(payload, 5);
  return out;
}

/** The end-stream message of a Connect streaming response (flag 0x02). */
function endStream(raw: Uint8Array): { error?: { code: string; message: string } } {
  let off = 0;
  for (;;) {
    const flags = raw[off]!;
    const len = new DataView(raw.buffer, raw.byteOffset + off + 1, 4).getUint32(0);
    const payload = raw.subarray(off + 5, off + 5 + len);
    if (flags & 0x02) return JSON.parse(new TextDecoder().decode(payload));
    off += 5 + len;
  }
}

async function stillServing(): Promise<void> {
  expect((await fetch(`${envd.url}/health`)).status).toBe(204);
  const ok = await rpc("/process.Process/List", "{}", "application/json");
  expect(ok.status).toBe(200);
}

describe("envd answers bad input with the right code and keeps serving", () => {
  it("malformed JSON on a unary RPC → 400 invalid_argument", async () => {
    const r = await rpc("/filesystem.Filesystem/Stat", '{"path": ', "application/json");
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text).code).toBe("invalid_argument");
    const wrongType = await rpc("/filesystem.Filesystem/Stat", '{"path": 42}', "application/json");
    expect(wrongType.status).toBe(400);
    expect(JSON.parse(wrongType.text).code).toBe("invalid_argument");
    await stillServing();
  });

  it("malformed protobuf → invalid_argument, as connect-go answers, in every protocol", async () => {
    const bad = new Uint8Array([0x0a, 0xff, 0xff, 0xff]);
    const hint = /^parse binary: .*not a valid filesystem\.StatRequest in the protobuf binary format; send a well-formed message$/;
    const unary = await rpc("/filesystem.Filesystem/Stat", bad, "application/proto");
    expect(unary.status).toBe(400);
    expect(JSON.parse(unary.text)).toMatchObject({ code: "invalid_argument", message: expect.stringMatching(hint) });
    const stream = await rpc("/filesystem.Filesystem/WatchDir", envelope(bad), "application/connect+proto");
    expect(stream.status).toBe(200);
    expect(endStream(stream.raw).error).toMatchObject({ code: "invalid_argument", message: expect.stringMatching(/WatchDirRequest/) });

    const web = await rpc("/filesystem.Filesystem/Stat", envelope(bad), "application/grpc-web+proto");
    expect(web.status).toBe(200);
    const trailer = new TextDecoder().decode(lastFrame(web.raw));
    expect(trailer).toMatch(/grpc-status: 3\r\n/);
    expect(decodeURIComponent(/grpc-message: (\S+)/.exec(trailer)![1]!)).toMatch(hint);

    const grpc = await grpcCall("/filesystem.Filesystem/Stat", envelope(bad));
    expect(grpc.trailers["grpc-status"]).toBe("3");
    expect(decodeURIComponent(String(grpc.trailers["grpc-message"]))).toMatch(hint);
    await stillServing();
  });

  it("a well-formed message still answers as before in every protocol (only parse failures are rewritten)", async () => {
    const missing = JSON.stringify({ path: "/no/such/file/here" });
    const unary = await rpc("/filesystem.Filesystem/Stat", missing, "application/json");
    expect(unary.status).toBe(404);
    expect(JSON.parse(unary.text).code).toBe("not_found");
    const proto = new Uint8Array([0x0a, 0x02, 0x2f, 0x78]); // path: "/x"
    const grpc = await grpcCall("/filesystem.Filesystem/Stat", envelope(proto));
    expect(grpc.trailers["grpc-status"]).toBe("5");
    const web = await rpc("/filesystem.Filesystem/Stat", envelope(proto), "application/grpc-web+proto");
    expect(new TextDecoder().decode(lastFrame(web.raw))).toMatch(/grpc-status: 5\r\n/);
  });

  it("malformed JSON in a streaming request → 200 with an end-stream error", async () => {
    const r = await rpc("/process.Process/Start", envelope(new TextEncoder().encode("{not json")), "application/connect+json");
    expect(r.status).toBe(200);
    expect(endStream(r.raw).error?.code).toBe("invalid_argument");
    const truncated = await rpc("/process.Process/Start", envelope(new TextEncoder().encode("{}")).subarray(0, 4), "application/connect+json");
    expect(truncated.status).toBe(200);
    expect(endStream(truncated.raw).error?.code).toMatch(/invalid_argument|internal/);
    await stillServing();
  });

  it("a NUL byte in a path → invalid_argument on RPCs (unary and streams), 400 on /files", async () => {
    const nul = JSON.stringify({ path: "/tmp/a\u0000b" });
    const stat = await rpc("/filesystem.Filesystem/Stat", nul, "application/json");
    expect(stat.status).toBe(400);
    expect(JSON.parse(stat.text)).toMatchObject({ code: "invalid_argument", message: expect.stringMatching(/NUL byte.*remove it/) });
    const watch = await rpc("/filesystem.Filesystem/WatchDir", envelope(new TextEncoder().encode(nul)), "application/connect+json");
    expect(watch.status).toBe(200);
    expect(endStream(watch.raw).error?.code).toBe("invalid_argument");
    const cwd = JSON.stringify({ process: { cmd: "/bin/true", cwd: "/tmp\u0000" } });
    const start = await rpc("/process.Process/Start", envelope(new TextEncoder().encode(cwd)), "application/connect+json");
    expect(endStream(start.raw).error?.code).toBe("invalid_argument");

    const download = await fetch(`${envd.url}/files?path=/tmp/a%00b`);
    expect(download.status).toBe(400);
    expect(await download.json()).toMatchObject({ code: 400, message: expect.stringContaining("NUL byte") });
    const upload = await fetch(`${envd.url}/files?path=/tmp/a%00b`, { method: "POST", headers: { "content-type": "application/octet-stream" }, body: "x" });
    expect(upload.status).toBe(400);
    const form = new FormData();
    form.append("file", new Blob(["x"]), "/tmp/a\u0000b");
    const multipart = await fetch(`${envd.url}/files`, { method: "POST", body: form });
    expect(multipart.status).toBe(400);
    await stillServing();
  });

  it("a stream for an unknown pid ends with not_found in the end-stream (HTTP 200)", async () => {
    const body = envelope(new TextEncoder().encode('{"process":{"pid":999999}}'));
    const r = await rpc("/process.Process/Connect", body, "application/connect+json");
    expect(r.status).toBe(200);
    expect(r.type).toBe("application/connect+json");
    expect(endStream(r.raw).error).toEqual({ code: "not_found", message: "process with pid 999999 not found" });
  });

  it("an unsupported content type → 415 with Accept-Post, a wrong HTTP method → 405 with Allow, an unknown RPC → 404", async () => {
    const r = await rpc("/filesystem.Filesystem/Stat", "path=/", "text/plain");
    expect(r.status).toBe(415);
    expect(r.headers.get("accept-post")).toBe(
      "application/grpc, application/grpc+json, application/grpc+proto, application/grpc-web, application/grpc-web+json, application/grpc-web+proto, application/json, application/proto",
    );
    expect(JSON.parse(r.text)).toMatchObject({ code: 415, message: expect.stringContaining("send one of application/grpc") });
    const stream = await rpc("/process.Process/Start", "{}", "text/plain");
    expect(stream.status).toBe(415);
    expect(stream.headers.get("accept-post")).toMatch(/^application\/connect\+json, application\/connect\+proto, application\/grpc, /);

    const get = await fetch(`${envd.url}/filesystem.Filesystem/Stat`);
    expect(get.status).toBe(405);
    expect(get.headers.get("allow")).toBe("POST");
    expect(await get.json()).toMatchObject({ code: 405, message: expect.stringContaining("use POST") });

    const missing = await rpc("/filesystem.Filesystem/Nope", "{}", "application/json");
    expect(missing.status).toBe(404);
    await stillServing();
  });

  it("a unary message over 64 MiB → resource_exhausted, without buffering it all", async () => {
    const status = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${envd.url}/filesystem.Filesystem/Stat`, {
        method: "POST",
        headers: { "content-type": "application/json", "connect-protocol-version": "1", "content-length": String(65 * 1024 * 1024) },
      });
      req.on("response", (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode!, body }));
      });
      req.on("error", reject);
      const chunk = Buffer.alloc(1024 * 1024, 0x20);
      let sent = 0;
      const pump = () => {
        while (sent < 65) {
          sent++;
          if (!req.write(chunk)) return void req.once("drain", pump);
        }
        req.end();
      };
      pump();
    });
    expect(status.status).toBe(429);
    expect(JSON.parse(status.body).code).toBe("resource_exhausted");
    await stillServing();
  });

  it("a wrong access token → 401 JSON on RPCs, and the right one works", async () => {
    envd.context.state.accessToken = "right-token";
    try {
      const r = await rpc("/process.Process/List", "{}", "application/json", { "x-access-token": "wrong" });
      expect(r.status).toBe(401);
      expect(JSON.parse(r.text)).toMatchObject({ code: 401 });
      const ok = await rpc("/process.Process/List", "{}", "application/json", { "x-access-token": "right-token" });
      expect(ok.status).toBe(200);
    } finally {
      envd.context.state.accessToken = undefined;
    }
  });
});
