import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { getSignature } from "e2b";
import { createHash, randomBytes } from "node:crypto";
import http from "node:http";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Filesystem } from "../../gen/ts/filesystem/filesystem_pb.js";
import { Process } from "../../gen/ts/process/process_pb.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { collect, readUntil, run, sh } from "../helpers/process.js";

// The envd proxy on the control plane's port, against real sandboxes: the
// generated Connect clients, raw HTTP, signed /files URLs and failure cases.

interface Created {
  sandboxID: string;
  envdAccessToken: string;
}

interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

function withHeaders(headers: Record<string, string>): Interceptor {
  return (next) => async (req) => {
    for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
    return next(req);
  };
}

async function codeOf(p: Promise<unknown>): Promise<{ code: Code; message: string } | undefined> {
  try {
    await p;
  } catch (err) {
    const e = ConnectError.from(err);
    return { code: e.code, message: e.rawMessage };
  }
  return undefined;
}

describe("envd proxy", () => {
  let cp: TestControlPlane;
  let a: Created;
  let b: Created;
  const port = () => Number(new URL(cp.url).port);

  async function create(): Promise<Created> {
    const res = await fetch(`${cp.url}/v2/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", timeout: 600 }),
    });
    expect(res.status).toBe(201);
    return (await res.json()) as Created;
  }

  function clientsFor(s: { sandboxID: string; envdAccessToken: string }, opts: { binary?: boolean; port?: string } = {}) {
    const transport = createConnectTransport({
      baseUrl: cp.url,
      httpVersion: "1.1",
      useBinaryFormat: opts.binary ?? false,
      interceptors: [
        withHeaders({ "E2b-Sandbox-Id": s.sandboxID, "E2b-Sandbox-Port": opts.port ?? "49983", "X-Access-Token": s.envdAccessToken }),
      ],
    });
    return { process: createClient(Process, transport), fs: createClient(Filesystem, transport) };
  }

  /** A raw request to the control plane's port; `body` may be a stream. */
  function raw(method: string, path: string, headers: Record<string, string>, body?: Buffer | Readable): Promise<RawResponse> {
    return new Promise((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port: port(), method, path, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on("error", reject);
      });
      req.on("error", reject);
      if (body instanceof Readable) body.pipe(req);
      else req.end(body);
    });
  }

  const envdHeaders = (s: Created) => ({ "e2b-sandbox-id": s.sandboxID, "e2b-sandbox-port": "49983", "x-access-token": s.envdAccessToken });

  beforeAll(async () => {
    cp = await startTestControlPlane();
    [a, b] = await Promise.all([create(), create()]);
  });

  afterAll(async () => {
    await cp?.close();
  });

  it("streams a command's output through the proxy (Connect JSON and binary)", async () => {
    for (const binary of [false, true]) {
      const { process } = clientsFor(a, { binary });
      const r = await run(process, "for i in 1 2 3; do echo line$i; sleep 0.05; done; echo err >&2");
      expect(r.events[0]).toBe("start");
      expect(r.events.at(-1)).toBe("end");
      expect(r.stdout).toBe("line1\nline2\nline3\n");
      expect(r.stderr).toBe("err\n");
      expect(r.end?.exitCode).toBe(0);
    }
  });

  it("serves HTTP/2 (h2c) clients too", async () => {
    const transport = createConnectTransport({
      baseUrl: cp.url,
      httpVersion: "2",
      interceptors: [withHeaders({ "E2b-Sandbox-Id": a.sandboxID, "X-Access-Token": a.envdAccessToken })],
    });
    const r = await run(createClient(Process, transport), "echo over h2");
    expect(r.stdout).toBe("over h2\n");
    expect((await createClient(Filesystem, transport).stat({ path: "/tmp" })).entry?.name).toBe("tmp");
  });

  it("serves unary RPCs (Filesystem)", async () => {
    const { fs } = clientsFor(a);
    const dir = `/tmp/proxy-${randomBytes(4).toString("hex")}`;
    await fs.makeDir({ path: `${dir}/sub` });
    const st = await fs.stat({ path: `${dir}/sub` });
    expect(st.entry?.name).toBe("sub");
    const list = await fs.listDir({ path: dir, depth: 1 });
    expect(list.entries.map((e) => e.name)).toEqual(["sub"]);
    await fs.remove({ path: dir });
  });

  it("routes by Host <port>-<id>.<domain>", async () => {
    const host = { host: `49983-${a.sandboxID}.localhost:${port()}` };
    expect((await raw("GET", "/health", host)).status).toBe(204);
    const body = Buffer.from(JSON.stringify({ path: "/tmp" }));
    const res = await raw(
      "POST",
      "/filesystem.Filesystem/Stat",
      { ...host, "content-type": "application/json", "connect-protocol-version": "1", "x-access-token": a.envdAccessToken },
      body,
    );
    expect(res.status, res.body.toString()).toBe(200);
    expect(JSON.parse(res.body.toString()).entry.name).toBe("tmp");
  });

  it("uploads and downloads 64 MiB through the proxy intact", async () => {
    const size = 64 * 1024 * 1024;
    const path = `/tmp/proxy-big-${randomBytes(4).toString("hex")}.bin`;
    const sent = createHash("sha256");
    const chunk = 1024 * 1024;
    let i = 0;
    const source = new Readable({
      read() {
        if (i++ >= size / chunk) return void this.push(null);
        const c = randomBytes(chunk);
        sent.update(c);
        this.push(c);
      },
    });
    const headers = { ...envdHeaders(a), "content-type": "application/octet-stream" };
    const up = await raw("POST", `/files?path=${encodeURIComponent(path)}`, headers, source);
    expect(up.status, up.body.toString()).toBe(200);
    expect(JSON.parse(up.body.toString())[0]).toMatchObject({ path, type: "file" });

    const got = await new Promise<{ status: number; hash: string; bytes: number }>((resolve, reject) => {
      const h = createHash("sha256");
      let bytes = 0;
      http
        .get({ host: "127.0.0.1", port: port(), path: `/files?path=${encodeURIComponent(path)}`, headers: envdHeaders(a) }, (res) => {
          res.on("data", (c: Buffer) => {
            bytes += c.length;
            h.update(c);
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, hash: h.digest("hex"), bytes }));
          res.on("error", reject);
        })
        .on("error", reject);
    });
    expect(got.status).toBe(200);
    expect(got.bytes).toBe(size);
    expect(got.hash).toBe(sent.digest("hex"));
    await clientsFor(a).fs.remove({ path });
    // Both directions are counted in the control plane's metrics.
    const text = await (await fetch(`${cp.url}/metrics`)).text();
    for (const dir of ["in", "out"]) {
      const m = new RegExp(`^locale2b_proxied_bytes_total\\{direction="${dir}"\\} (\\d+)`, "m").exec(text);
      expect(Number(m?.[1]), dir).toBeGreaterThanOrEqual(size);
    }
  });

  it("serves signed /files URLs without routing headers, and refuses bad signatures (401)", async () => {
    const path = `/tmp/signed-${randomBytes(4).toString("hex")}.txt`;
    const w = await getSignature({ path, operation: "write", user: undefined, expirationInSeconds: 120, envdAccessToken: a.envdAccessToken });
    const q = (sig: string, exp: number | null) => `path=${encodeURIComponent(path)}&signature=${encodeURIComponent(sig)}&signature_expiration=${exp}`;
    const up = await raw("POST", `/files?${q(w.signature, w.expiration)}`, { "content-type": "application/octet-stream" }, Buffer.from("signed!"));
    expect(up.status, up.body.toString()).toBe(200);

    const r = await getSignature({ path, operation: "read", user: undefined, envdAccessToken: a.envdAccessToken, expirationInSeconds: 120 });
    const down = await fetch(`${cp.url}/files?${q(r.signature, r.expiration)}`);
    expect(down.status).toBe(200);
    expect(await down.text()).toBe("signed!");

    // A signature of the wrong operation, of another token, or garbage: 401 JSON.
    for (const sig of [w.signature, `v1_${"A".repeat(43)}`]) {
      const bad = await fetch(`${cp.url}/files?${q(sig, r.expiration)}`);
      expect(bad.status).toBe(401);
      expect(await bad.json()).toMatchObject({ code: 401 });
    }
    // Signed for this sandbox but expired: envd refuses it.
    const old = await getSignature({ path, operation: "read", user: undefined, envdAccessToken: a.envdAccessToken, expirationInSeconds: -10 });
    expect((await fetch(`${cp.url}/files?${q(old.signature, old.expiration)}`)).status).toBe(401);
  });

  it("checks the envd access token (401), except on /health", async () => {
    const wrong = { ...a, envdAccessToken: "not-the-token" };
    const files = await raw("GET", "/files?path=/tmp", { ...envdHeaders(wrong) });
    expect(files.status).toBe(401);
    expect(JSON.parse(files.body.toString())).toMatchObject({ code: 401 });
    const noToken = await raw("GET", "/files?path=/tmp", { "e2b-sandbox-id": a.sandboxID });
    expect(noToken.status).toBe(401);
    expect((await codeOf(clientsFor(wrong).fs.stat({ path: "/tmp" })))?.code).toBe(Code.Unauthenticated);
    expect((await codeOf(run(clientsFor(wrong).process, "true")))?.code).toBe(Code.Unauthenticated);
    // b's token does not open a.
    expect((await codeOf(clientsFor({ sandboxID: a.sandboxID, envdAccessToken: b.envdAccessToken }).fs.stat({ path: "/" })))?.code).toBe(
      Code.Unauthenticated,
    );
    expect((await raw("GET", "/health", { "e2b-sandbox-id": a.sandboxID })).status).toBe(204);
  });

  it("answers 502 'not found' for unknown sandboxes (SDKs: not running), 502 for a user port nothing listens on, 403 for internal paths", async () => {
    const ghost = { sandboxID: "ighostsandbox0000000", envdAccessToken: "x" };
    const health = await raw("GET", "/health", { "e2b-sandbox-id": ghost.sandboxID });
    expect(health.status).toBe(502);
    // E2B's proxy answer, word for word and in its field order.
    expect(health.body.toString()).toBe(`{"sandboxId":"${ghost.sandboxID}","message":"The sandbox was not found","code":502}`);
    const userPort = await raw("GET", "/", { host: `8080-${ghost.sandboxID}.localhost:${port()}` });
    expect(userPort.status).toBe(502);
    expect(JSON.parse(userPort.body.toString())).toEqual({ sandboxId: ghost.sandboxID, message: "The sandbox was not found", code: 502 });
    const unary = await codeOf(clientsFor(ghost).fs.stat({ path: "/" }));
    expect(unary).toEqual({ code: Code.Unavailable, message: "The sandbox was not found" });
    expect((await codeOf(run(clientsFor(ghost).process, "true")))?.code).toBe(Code.Unavailable);
    expect((await raw("GET", "/health", { "e2b-sandbox-id": "Not-An-Id!" })).status).toBe(502);

    const closedPort = await raw("GET", "/", { ...envdHeaders(a), "e2b-sandbox-port": "8080" });
    expect(closedPort.status).toBe(502);
    // Nothing listens there (user-ports.test.ts has a server that does).
    expect(JSON.parse(closedPort.body.toString()).message).toMatch(/port 8080 in the sandbox: (connection refused|the process listening there is not in this sandbox)/);
    expect((await codeOf(clientsFor(a, { port: "3000" }).fs.stat({ path: "/" })))?.code).toBe(Code.Unavailable);

    const init = await raw("POST", "/init", { ...envdHeaders(a), "content-type": "application/json" }, Buffer.from("{}"));
    expect(init.status).toBe(403);
  });

  it("answers 'not running' for a paused sandbox, and serves it again after connect", async () => {
    const api = (path: string, body: unknown) =>
      fetch(`${cp.url}${path}`, { method: "POST", headers: { "x-api-key": cp.apiKey, "content-type": "application/json" }, body: JSON.stringify(body) });
    const { process, fs } = clientsFor(b);
    expect((await run(process, "echo before")).stdout).toBe("before\n");
    expect((await api(`/sandboxes/${b.sandboxID}/pause`, {})).status).toBe(204);
    const health = await raw("GET", "/health", { "e2b-sandbox-id": b.sandboxID });
    expect(health.status).toBe(502);
    expect(JSON.parse(health.body.toString()).message).toMatch(/paused/);
    expect((await codeOf(run(process, "true")))?.code).toBe(Code.Unavailable);
    expect((await codeOf(fs.stat({ path: "/" })))?.code).toBe(Code.Unavailable);
    expect((await api(`/v2/sandboxes/${b.sandboxID}/connect`, {})).status).toBe(201);
    expect((await run(process, "echo after")).stdout).toBe("after\n");
  });

  it("survives a client that goes away mid-stream", async () => {
    const { process } = clientsFor(a);
    const abort = new AbortController();
    const it = process.start(sh("echo up; sleep 100"), { signal: abort.signal })[Symbol.asyncIterator]();
    await readUntil(it, (t) => t.includes("up"));
    abort.abort();
    await expect(it.next()).rejects.toThrow();
    expect((await run(process, "echo still")).stdout).toBe("still\n");
  });

  it("ends an open stream with an error when the sandbox is killed", async () => {
    const { process } = clientsFor(a);
    const it = process.start(sh("echo up; sleep 100"), {})[Symbol.asyncIterator]();
    await readUntil(it, (t) => t.includes("up"));
    const killed = await fetch(`${cp.url}/sandboxes/${a.sandboxID}`, { method: "DELETE", headers: { "x-api-key": cp.apiKey } });
    expect(killed.status).toBe(204);
    const rest = collect({ [Symbol.asyncIterator]: () => it });
    await expect(rest).rejects.toBeInstanceOf(ConnectError);
    // And the sandbox is gone for new requests.
    expect((await raw("GET", "/health", { "e2b-sandbox-id": a.sandboxID })).status).toBe(502);
  });
});
