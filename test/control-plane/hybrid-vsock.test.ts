// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import http from "node:http";
import net from "node:net";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dialHybridVsock, DialError } from "../../control-plane/transport/hybrid-vsock.js";
import { LocalEndpoint } from "../../control-plane/transport/local-endpoint.js";
import { Transport } from "../../control-plane/transport/transport.js";
import { EnvdClient } from "../../control-plane/transport/envd-client.js";
import { Process } from "../../gen/ts/process/process_pb.js";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { collect, sh } from "../helpers/process.js";
import { recorder } from "../helpers/vsock-recorder.js";

let envd: TestEnvd;
let sock: string;
beforeAll(async () => {
  const { mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  sock = join(mkdtempSync(join(tmpdir(), "l2b-vsock-")), "envd.sock");
  envd = await startTestEnvd({ listen: ["tcp://127.0.0.1:0", `unix+vsock://${sock}`] });
});
afterAll(async () => {
  await envd?.close();
  if (sock) (await import("node:fs")).rmSync(dirname(sock), { recursive: true, force: true });
});

function get(agent: http.Agent, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ agent, path, headers: { host: "envd" } }, (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode!, body }));
      })
      .on("error", reject);
  });
}

describe("hybrid vsock transport (against envd's unix+vsock listener)", () => {
  it("answers CONNECT 49983 with OK and then speaks HTTP", async () => {
    const s = await dialHybridVsock(sock, 49983);
    s.write("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let reply = "";
    for await (const c of s) reply += c;
    expect(reply.startsWith("HTTP/1.1 204")).toBe(true);
  });

  it("refuses other ports and missing sockets with clear errors, without hanging", async () => {
    await expect(dialHybridVsock(sock, 1234)).rejects.toThrow(/refused for port 1234/);
    const err = await dialHybridVsock(join(sock, "..", "missing.sock"), 49983).catch((e) => e);
    expect(err).toBeInstanceOf(DialError);
    expect(err.code).toBe("ENOENT");
    // A peer that accepts but never answers: the dial times out.
    const silent = net.createServer(() => undefined);
    const silentPath = join(sock, "..", "silent.sock");
    await new Promise<void>((r) => silent.listen(silentPath, r));
    await expect(dialHybridVsock(silentPath, 49983, 300)).rejects.toThrow(/did not answer/);
    silent.close();
  });

  it("the control plane's own requests (/health, /init) never queue behind user streams holding every pooled connection", async () => {
    const ep = new LocalEndpoint("sbx", sock);
    const agent = ep.agent();
    agent.maxSockets = 2; // the proxy's pool, full (its requests, like the control plane's, name no host: one origin)
    const client = createClient(Process, createConnectTransport({ baseUrl: "http://localhost", httpVersion: "1.1", nodeOptions: { agent } }));
    const ctl = new AbortController();
    const streams = [0, 1].map(async () => {
      const it = client.start(sh("sleep 30"), { signal: ctl.signal })[Symbol.asyncIterator]();
      await it.next(); // started: the connection is held
      return it;
    });
    await Promise.all(streams);
    expect(Object.values(agent.sockets).flat().length).toBe(2);
    const health = await new EnvdClient().request(ep, { method: "GET", path: "/health", timeoutMs: 5_000 });
    expect(health.status).toBe(204);
    ctl.abort();
    ep.close();
  });

  it("pools keep-alive connections and carries Connect streams", async () => {
    const ep = new LocalEndpoint("sbx", sock);
    const agent = ep.agent();
    expect((await get(agent, "/health")).status).toBe(204);
    expect((await get(agent, "/health")).status).toBe(204);
    const free = Object.values(agent.freeSockets).flat().length;
    expect(free).toBe(1); // the second request reused the first connection

    const client = createClient(
      Process,
      createConnectTransport({ baseUrl: "http://envd", httpVersion: "1.1", nodeOptions: { agent } }),
    );
    const r = await collect(client.start(sh("echo through-vsock")));
    expect(r.stdout).toBe("through-vsock\n");
    const pooled = Object.values(agent.freeSockets).flat();
    ep.drop();
    await new Promise((r) => setTimeout(r, 50));
    expect(pooled.every((s) => s?.destroyed)).toBe(true);
    expect(ep.agent()).not.toBe(agent); // a fresh agent after the drop
    ep.close();
  });
});

describe("vsock gate (what keeps a paused QEMU VM's vsock quiet)", () => {
  const tick = (ms = 100) => new Promise((r) => setTimeout(r, ms));

  it("holds writes, ends and new dials while held, and lets them through in order once released", async () => {
    const srv = await recorder();
    const ep = new LocalEndpoint("sbx", srv.path);
    const gate = ep.gate;
    const s = await dialHybridVsock(srv.path, 49983, 5_000, gate);
    s.write("one;");
    await tick();
    expect(srv.seen.join("")).toBe("one;");

    ep.gate.hold();
    s.write("two;");
    s.end();
    const dialing = dialHybridVsock(srv.path, 49983, 5_000, gate);
    await tick(300);
    expect(srv.seen.join("")).toBe("one;"); // nothing written, not ended
    expect(srv.dials()).toBe(1); // no new connection either

    ep.gate.release();
    const second = await dialing;
    await tick();
    expect(srv.seen.join("")).toBe("one;two;<end>");
    expect(srv.dials()).toBe(2);
    second.destroy();
    ep.close();
    srv.close();
  });

  it("defers destroy while held; forget() (the sandbox is gone) lets everything go", async () => {
    const srv = await recorder();
    const ep = new LocalEndpoint("sbx", srv.path);
    const s = await dialHybridVsock(srv.path, 49983, 5_000, ep.gate);
    ep.gate.hold();
    s.destroy();
    await tick(200);
    expect(s.destroyed).toBe(false);
    ep.close();
    await tick();
    expect(s.destroyed).toBe(true);
    ep.close();
    srv.close();
  });
  it("a control-plane stop with the VM still stopped: waiting dials fail, deferred writes and closes never reach it", async () => {
    const srv = await recorder();
    const transport = new Transport();
    const ep = transport.local("sbx", srv.path) as LocalEndpoint;
    const s = await dialHybridVsock(srv.path, 49983, 5_000, ep.gate);
    ep.gate.hold();
    s.write("held;");
    s.destroy();
    const dialing = dialHybridVsock(srv.path, 49983, 5_000, ep.gate).then(
      () => "dialed",
      (err: Error) => err.message,
    );
    transport.destroy();
    expect(await dialing).toMatch(/stopped \(paused\).*shutting down/);
    await tick(200);
    expect(srv.seen).toEqual([]); // nothing written, no end
    expect(srv.dials()).toBe(1);
    expect(s.destroyed).toBe(false); // its close would reach the stopped VM
    srv.close();
  });

  it("destroyLive closes every open connection at once, held or not, and counts them", async () => {
    const srv = await recorder();
    const ep = new LocalEndpoint("sbx", srv.path);
    const a = await dialHybridVsock(srv.path, 49983, 5_000, ep.gate);
    const b = await dialHybridVsock(srv.path, 49983, 5_000, ep.gate);
    expect(ep.liveCount).toBe(2);
    b.destroy();
    await tick();
    expect(ep.liveCount).toBe(1);
    ep.gate.hold();
    await ep.gate.destroyLive();
    expect(a.destroyed).toBe(true);
    expect(ep.liveCount).toBe(0);
    ep.close();
    srv.close();
  });
});

describe("LocalEndpoint.closeIdle (before a QEMU VM is stopped)", () => {
  it("closes the sandbox's idle keep-alive connections and leaves in-flight ones alone", async () => {
    const ep = new LocalEndpoint("sbx", sock);
    const agent = ep.agent();
    // In flight: a request whose body is still being sent (as a long stream would be).
    const inflight = http.request({ agent, method: "POST", path: "/envs", headers: { host: "envd", "content-type": "application/json" } });
    inflight.on("error", () => undefined);
    inflight.write("");
    await new Promise<void>((r) => inflight.once("socket", () => r()));
    // Idle: a second connection, back in the pool once its request is done.
    expect((await get(agent, "/health")).status).toBe(204);
    const idle = Object.values(agent.freeSockets).flat();
    expect(idle).toHaveLength(1);
    expect(idle[0]).not.toBe(inflight.socket);
    ep.closeIdle();
    expect(idle[0]!.destroyed).toBe(true);
    expect(inflight.socket?.destroyed ?? false).toBe(false);
    inflight.destroy();
    ep.close();
  });
});
