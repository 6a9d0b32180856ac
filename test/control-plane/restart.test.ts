import { ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Process } from "../../gen/ts/process/process_pb.js";
import { serve, type Served } from "../helpers/cli.js";
import { collect, readUntil, sh } from "../helpers/process.js";

const dataDir = mkdtempSync(join(tmpdir(), "locale2b-restart-"));
const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
const env = { LOCALE2B_API_KEY: apiKey };
let server: Served | undefined;

afterAll(async () => {
  if (server) {
    for (const id of await ids(server.url).catch(() => [])) {
      await fetch(`${server.url}/sandboxes/${id}`, { method: "DELETE", headers: { "x-api-key": apiKey } });
    }
    await server.stop();
  }
  rmSync(dataDir, { recursive: true, force: true });
});

async function api(url: string, method: string, path: string, body?: unknown) {
  const res = await fetch(url + path, {
    method,
    headers: { "x-api-key": apiKey, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

async function ids(url: string): Promise<string[]> {
  return ((await api(url, "GET", "/v2/sandboxes?state=running,paused")).body as { sandboxID: string }[]).map((s) => s.sandboxID);
}

function processClient(url: string, sandbox: { sandboxID: string; envdAccessToken: string }) {
  const headers: Interceptor = (next) => (req) => {
    req.header.set("e2b-sandbox-id", sandbox.sandboxID);
    req.header.set("e2b-sandbox-port", "49983");
    req.header.set("x-access-token", sandbox.envdAccessToken);
    return next(req);
  };
  return createClient(Process, createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors: [headers] }));
}

describe("control-plane restart (SIGKILL) loses nothing", () => {
  it("keeps sandboxes, files and processes; open streams error; dead sandboxes are marked", async () => {
    server = await serve(dataDir, [], env);
    const a = (await api(server.url, "POST", "/v2/sandboxes", { templateID: "base", timeout: 600, metadata: { role: "keeper" } })).body;
    const b = (await api(server.url, "POST", "/v2/sandboxes", { templateID: "base", timeout: 600 })).body;
    const pa = processClient(server.url, a);
    await collect(pa.start(sh("echo kept > ~/kept.txt")));
    const bg = pa.start(sh("echo up; exec sleep 1000"), { timeoutMs: 0 });
    const it = bg[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("up"));
    const envdB = (await api(server.url, "GET", `/sandboxes/${b.sandboxID}`)).body;
    expect(envdB.state).toBe("running");

    // The control plane dies hard while a stream is open (its exit may come before the stream's error).
    const exited = new Promise((r) => (server!.child.exitCode !== null || server!.child.signalCode !== null ? r(undefined) : server!.child.once("exit", r)));
    server.child.kill("SIGKILL");
    const streamErr = await collect({ [Symbol.asyncIterator]: () => it }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(streamErr).toBeInstanceOf(ConnectError);
    await exited;

    // Sandbox b dies while no control plane watches it.
    const { execFileSync } = await import("node:child_process");
    const bPids = execFileSync("sh", ["-c", `pgrep -f "${b.sandboxID}/envd.sock" || true`], { encoding: "utf8" }).split("\n").filter(Boolean);
    expect(bPids.length).toBeGreaterThan(0);
    for (const p of bPids) {
      try {
        process.kill(Number(p), "SIGKILL");
      } catch {
        // already gone
      }
    }

    server = await serve(dataDir, [], env);
    const info = await api(server.url, "GET", `/sandboxes/${a.sandboxID}`);
    expect(info.status).toBe(200);
    expect(info.body.state).toBe("running");
    expect(info.body.metadata).toEqual({ role: "keeper" });
    const again = processClient(server.url, a);
    expect((await collect(again.start(sh("cat ~/kept.txt")))).stdout).toBe("kept\n");
    const list = await again.list({});
    expect(list.processes.map((p) => p.pid)).toContain(pid);

    const dead = await api(server.url, "GET", `/sandboxes/${b.sandboxID}`);
    expect(dead.status).toBe(404);
    expect(await ids(server.url)).toEqual([a.sandboxID]);
  });
});
