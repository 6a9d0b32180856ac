// A server the user runs in a sandbox, reached through the control plane on
// <port>-<id>.<domain> (the E2B SDKs' getHost), on the zero-config process
// runtime, whose sandboxes share the host's network: plain HTTP with streamed
// bodies both ways, a WebSocket, and refusals (closed port, a host port the
// sandbox does not own, a sandbox without public traffic).
import { createHash, randomBytes } from "node:crypto";
import http from "node:http";
import net from "node:net";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv, waitFor } from "../helpers/sdk.js";

// The user's server: /hello, /echo (streams the request body back), /headers (the request's raw headers), /bytes?n=
// (n pseudo-random bytes, streamed), and a minimal WebSocket echo (RFC 6455
// handshake, unfragmented frames) on upgrade.
const SERVER = `
const http = require("node:http");
const crypto = require("node:crypto");
const os = require("node:os");
const port = Number(process.argv[2]);
const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  if (url.pathname === "/hello") return res.end("hello from " + os.hostname() + " via " + req.headers.host);
  if (url.pathname === "/echo") return req.pipe(res);
  if (url.pathname === "/headers") {
    res.setHeader("X-Server-Case", "kept");
    return res.end(JSON.stringify(req.rawHeaders));
  }
  if (url.pathname === "/bytes") {
    let left = Number(url.searchParams.get("n"));
    let seed = 7;
    const more = () => {
      while (left > 0) {
        const chunk = Buffer.alloc(Math.min(left, 65536));
        for (let i = 0; i < chunk.length; i++) { seed = (seed * 1103515245 + 12345) >>> 0; chunk[i] = seed >>> 24; }
        left -= chunk.length;
        if (!res.write(chunk)) return res.once("drain", more);
      }
      res.end();
    };
    return more();
  }
  res.statusCode = 404;
  res.end("no such page");
});
server.on("upgrade", (req, socket) => {
  const accept = crypto.createHash("sha1").update(req.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
  socket.write("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: " + accept + "\\r\\nX-Seen-Host: " + req.headers.host + "\\r\\n\\r\\n");
  let buf = Buffer.alloc(0);
  socket.on("data", (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 6) {
      const op = buf[0] & 15, len = buf[1] & 127;
      if (len > 125 || buf.length < 6 + len) return;
      const mask = buf.subarray(2, 6), data = Buffer.from(buf.subarray(6, 6 + len));
      for (let i = 0; i < len; i++) data[i] ^= mask[i % 4];
      buf = buf.subarray(6 + len);
      const reply = op === 1 ? Buffer.from("echo: " + data) : data;
      socket.write(Buffer.concat([Buffer.from([0x80 | op, reply.length]), reply]));
      if (op === 8) socket.end();
    }
  });
});
server.listen(port, "127.0.0.1", () => console.log("listening " + port));
`;

let cp: TestControlPlane;
let restoreEnv = () => {};
let sandbox: Sandbox;
let port: number;

/** A port nothing listens on right now (sandboxes here share the host's network). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

interface Got {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** A request to the control plane's port with `Host: <getHost(port)>`, as a browser on a wildcard DNS name would send it. */
function request(host: string, path: string, opts: { method?: string; body?: Buffer; headers?: Record<string, string> } = {}): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = http.request(cp.url + path, { method: opts.method ?? "GET", headers: { host, ...opts.headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(opts.body);
  });
}

/** Opens a raw connection to the control plane and sends an HTTP/1.1 Upgrade request; resolves with the socket and the response head. */
function upgrade(host: string, headers: Record<string, string>, path = "/chat"): Promise<{ socket: net.Socket; head: string; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(new URL(cp.url).port), "127.0.0.1");
    let seen = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      seen = Buffer.concat([seen, d]);
      const end = seen.indexOf("\r\n\r\n");
      if (end < 0) return;
      socket.off("data", onData);
      resolve({ socket, head: seen.subarray(0, end).toString(), rest: seen.subarray(end + 4) });
    };
    socket.on("data", onData);
    socket.on("error", reject);
    socket.on("close", () => reject(new Error(`closed before a response head: ${seen.toString()}`)));
    const lines = Object.entries({ host, ...headers }).map(([k, v]) => `${k}: ${v}\r\n`);
    socket.write(`GET ${path} HTTP/1.1\r\n${lines.join("")}\r\n`);
  });
}

/** One raw HTTP/1.1 exchange on a fresh connection (Connection: close); resolves with the raw response head and body. */
function rawRequest(lines: string[]): Promise<{ head: string; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(new URL(cp.url).port), "127.0.0.1");
    let seen = Buffer.alloc(0);
    socket.on("data", (d: Buffer) => (seen = Buffer.concat([seen, d])));
    socket.on("error", reject);
    socket.on("close", () => {
      const text = seen.toString();
      const end = text.indexOf("\r\n\r\n");
      resolve({ head: text.slice(0, end), body: text.slice(end + 4) });
    });
    socket.write(`${lines.join("\r\n")}\r\nConnection: close\r\n\r\n`);
  });
}

function wsHeaders(key: string): Record<string, string> {
  return { upgrade: "websocket", connection: "Upgrade", "sec-websocket-key": key, "sec-websocket-version": "13" };
}

/** A masked client text frame (payload ≤ 125 bytes). */
function clientFrame(op: number, text: string): Buffer {
  const data = Buffer.from(text);
  const mask = randomBytes(4);
  const masked = Buffer.from(data.map((b, i) => b ^ mask[i % 4]!));
  return Buffer.concat([Buffer.from([0x80 | op, 0x80 | data.length]), mask, masked]);
}

/** Reads `n` bytes from a socket, `first` being what was already read; the rest is for the next read. */
function readBytes(socket: net.Socket, n: number, first: Buffer): Promise<{ bytes: Buffer; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    let got = first;
    const check = () => {
      if (got.length < n) return;
      socket.off("data", onData);
      resolve({ bytes: got.subarray(0, n), rest: got.subarray(n) });
    };
    const onData = (d: Buffer) => {
      got = Buffer.concat([got, d]);
      check();
    };
    socket.on("data", onData);
    socket.once("close", () => reject(new Error(`closed after ${got.length} of ${n} bytes`)));
    check();
  });
}

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/** What the server's /bytes?n= sends. */
function expectedBytes(n: number): Buffer {
  const out = Buffer.alloc(n);
  let seed = 7;
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    out[i] = seed >>> 24;
  }
  return out;
}

beforeAll(async () => {
  cp = await startTestControlPlane();
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  sandbox = await Sandbox.create("base");
  port = await freePort();
  await sandbox.files.write("/home/user/server.js", SERVER);
  await sandbox.commands.run(`node /home/user/server.js ${port}`, { background: true, timeoutMs: 0 });
  let last: Got | Error = new Error("no request yet");
  await waitFor(
    async () => (last = await request(sandbox.getHost(port), "/hello").catch((e: Error) => e)) instanceof Error === false && (last as Got).status === 200,
    () => `the user's server on port ${port} (last: ${last instanceof Error ? last.message : `${last.status} ${last.body}`})`,
  );
});

afterAll(async () => {
  await sandbox?.kill().catch(() => undefined);
  restoreEnv();
  await cp?.close();
});

describe("user ports on the process runtime (host network)", () => {
  it("serves the user's server on getHost(port), with request and response bodies streamed", async () => {
    const host = sandbox.getHost(port);
    expect(host).toBe(`${port}-${sandbox.sandboxId}.localhost:${new URL(cp.url).port}`);
    const hello = await request(host, "/hello");
    expect(hello.status).toBe(200);
    // The process that answered runs in this sandbox (its hostname is the sandbox id), and saw the Host it was asked for.
    expect(hello.body.toString()).toBe(`hello from ${sandbox.sandboxId} via ${host}`);

    const upload = randomBytes(4 << 20);
    const echo = await request(host, "/echo", { method: "POST", body: upload, headers: { "content-type": "application/octet-stream" } });
    expect(echo.status).toBe(200);
    expect(sha(echo.body)).toBe(sha(upload));

    const n = 16 << 20;
    const big = await request(host, `/bytes?n=${n}`);
    expect(big.status).toBe(200);
    expect(big.body.length).toBe(n);
    expect(sha(big.body)).toBe(sha(expectedBytes(n)));

    expect((await request(host, "/missing")).status).toBe(404);
    // The same server through the SDK-style routing headers.
    const viaHeaders = await request(new URL(cp.url).host, "/hello", { headers: { "e2b-sandbox-id": sandbox.sandboxId, "e2b-sandbox-port": String(port) } });
    expect(viaHeaders.status).toBe(200);
  });

  it("forwards header names in the client's case and the server's back, as E2B's proxy does", async () => {
    const host = sandbox.getHost(port);
    const r = await rawRequest(["GET /headers HTTP/1.1", `Host: ${host}`, "X-Custom-Case: 1", "x-lower-case: 2", "X-Twice: a", "x-twice: b"]);
    expect(r.head).toMatch(/^HTTP\/1\.1 200 /);
    expect(r.head).toContain("\r\nX-Server-Case: kept");
    const seen = JSON.parse(r.body) as string[];
    const names = seen.filter((_, i) => i % 2 === 0);
    expect(names).toEqual(expect.arrayContaining(["Host", "X-Custom-Case", "x-lower-case", "X-Twice", "x-twice"]));
    expect(seen[seen.indexOf("Host") + 1]).toBe(host);
    // Connection is hop-by-hop: the client's `close` stays on its hop.
    expect(seen[seen.indexOf("Connection") + 1]).not.toBe("close");
  });

  it("applies network.maskRequestHost: the server sees that Host (${PORT} = its port), the client's in X-Forwarded-Host", async () => {
    const masked = await Sandbox.create("base", { network: { maskRequestHost: "localhost:${PORT}" } });
    try {
      expect((await masked.getInfo()).network?.maskRequestHost).toBe("localhost:${PORT}");
      const p = await freePort();
      await masked.files.write("/home/user/server.js", SERVER);
      await masked.commands.run(`node /home/user/server.js ${p}`, { background: true, timeoutMs: 0 });
      const host = masked.getHost(p);
      await waitFor(async () => (await request(host, "/hello")).status === 200, `the masked sandbox's server on ${p}`);
      expect((await request(host, "/hello")).body.toString()).toBe(`hello from ${masked.sandboxId} via localhost:${p}`);
      const seen = JSON.parse((await rawRequest(["GET /headers HTTP/1.1", `Host: ${host}`, "X-Forwarded-Host: spoofed"])).body) as string[];
      expect(seen[seen.indexOf("Host") + 1]).toBe(`localhost:${p}`);
      const forwarded = seen.flatMap((v, i) => (i % 2 === 0 && v.toLowerCase() === "x-forwarded-host" ? [seen[i + 1]] : []));
      expect(forwarded).toEqual([host]);
      // Through the SDK-style routing headers too, and on WebSocket upgrades.
      const viaHeaders = await request(new URL(cp.url).host, "/hello", { headers: { "e2b-sandbox-id": masked.sandboxId, "e2b-sandbox-port": String(p) } });
      expect(viaHeaders.body.toString()).toBe(`hello from ${masked.sandboxId} via localhost:${p}`);
      const ws = await upgrade(host, wsHeaders(randomBytes(16).toString("base64")));
      ws.socket.destroy();
      expect(ws.head).toMatch(/^HTTP\/1\.1 101 /);
      expect(ws.head).toContain(`X-Seen-Host: localhost:${p}`);
      // envd's own port is never masked: the SDK keeps working.
      expect((await masked.commands.run("echo envd")).stdout).toBe("envd\n");
    } finally {
      await masked.kill();
    }
    // Not a host: refused at create, saying what is expected.
    const bad = await fetch(`${cp.url}/v2/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", network: { maskRequestHost: "evil\r\nX-Injected: 1" } }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toMatch(/maskRequestHost .* is not a host name.*localhost:\$\{PORT\}/);
  });

  it("answers 502 for a closed port, and for a host port the sandbox does not own", async () => {
    const closed = await freePort();
    const none = await request(sandbox.getHost(closed), "/");
    expect(none.status).toBe(502);
    expect(JSON.parse(none.body.toString()).message).toMatch(new RegExp(`port ${closed} in the sandbox: connection refused`));

    // A server of the host's (this test's) is not the sandbox's to expose: the sandbox's 127.0.0.1 is its own.
    const hostServer = http.createServer((_req, res) => res.end("host secret"));
    await new Promise<void>((resolve) => hostServer.listen(0, "127.0.0.1", resolve));
    try {
      const hostPort = (hostServer.address() as net.AddressInfo).port;
      const r = await request(sandbox.getHost(hostPort), "/");
      expect(r.status).toBe(502);
      expect(r.body.toString()).not.toContain("host secret");
      expect(JSON.parse(r.body.toString()).message).toMatch(/connection refused|not in this sandbox/);
    } finally {
      hostServer.close();
    }
  });

  it("tunnels a WebSocket to the user's server, frames both ways, and closes both ends together", async () => {
    const key = randomBytes(16).toString("base64");
    const opened = await upgrade(sandbox.getHost(port), wsHeaders(key));
    const { socket, head } = opened;
    let rest = opened.rest;
    try {
      expect(head).toMatch(/^HTTP\/1\.1 101 /);
      const accept = createHash("sha1").update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest("base64");
      expect(head.toLowerCase()).toContain(`sec-websocket-accept: ${accept.toLowerCase()}`);
      for (const text of ["hi", "second message", "x".repeat(120)]) {
        socket.write(clientFrame(1, text));
        const reply = `echo: ${text}`;
        const read = await readBytes(socket, 2 + reply.length, rest);
        const frame = read.bytes;
        rest = read.rest;
        expect(frame[0]).toBe(0x81);
        expect(frame.subarray(2).toString()).toBe(reply);
      }
      const closedByServer = new Promise<void>((resolve) => socket.once("close", () => resolve()));
      socket.write(clientFrame(8, ""));
      const close = await readBytes(socket, 2, rest);
      expect(close.bytes[0]).toBe(0x88);
      await closedByServer;
    } finally {
      socket.destroy();
    }
  });

  it("refuses an Upgrade to a closed port with a plain 502, and serves an Upgrade not meant for a sandbox as plain HTTP/1.1", async () => {
    const closed = await freePort();
    const refused = await upgrade(sandbox.getHost(closed), wsHeaders(randomBytes(16).toString("base64")));
    refused.socket.destroy();
    expect(refused.head).toMatch(/^HTTP\/1\.1 502 /);

    // `curl --http2` on cleartext asks for h2c; the control plane answers over HTTP/1.1 instead.
    const h2c = await upgrade(new URL(cp.url).host, { upgrade: "h2c", connection: "Upgrade, HTTP2-Settings", "http2-settings": "AAMAAABkAARAAAAAAAIAAAAA" }, "/health");
    h2c.socket.destroy();
    expect(h2c.head).toMatch(/^HTTP\/1\.1 200 /);
  });

  it("asks for the traffic token on every user-port request of a sandbox made with allowPublicTraffic: false", async () => {
    const privateSbx = await Sandbox.create("base", { network: { allowPublicTraffic: false } });
    try {
      const p = await freePort();
      await privateSbx.files.write("/home/user/server.js", SERVER);
      await privateSbx.commands.run(`node /home/user/server.js ${p}`, { background: true, timeoutMs: 0 });
      const host = privateSbx.getHost(p);
      const token = privateSbx.trafficAccessToken!;
      expect(token).toBeTruthy();
      const withToken = { "e2b-traffic-access-token": token };
      await waitFor(async () => (await request(host, "/hello", { headers: withToken })).status === 200, `the private sandbox's server on ${p}`);
      expect((await request(host, "/hello")).status).toBe(403);
      const ws = await upgrade(host, wsHeaders(randomBytes(16).toString("base64")));
      ws.socket.destroy();
      expect(ws.head).toMatch(/^HTTP\/1\.1 403 /);
      const wsOk = await upgrade(host, { ...wsHeaders(randomBytes(16).toString("base64")), ...withToken });
      wsOk.socket.destroy();
      expect(wsOk.head).toMatch(/^HTTP\/1\.1 101 /);
    } finally {
      await privateSbx.kill();
    }
  });
});
