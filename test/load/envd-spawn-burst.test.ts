// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// envd under a burst of Start streams, reached as the control plane reaches
// it (hybrid-vsock handshake on a Unix socket, pooled HTTP/1.1 connections):
// every stream gets its response headers, and a new connection its handshake
// and answer, while the burst's forks still wait their turn (one per turn of
// the event loop); then every process runs and its output comes whole and in
// order. Proven by the order of events, not by how long anything took.
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { startEnvd, type RunningEnvd } from "../../envd/main.js";
import { ENVD_PORT } from "../../envd/version.js";
import { spawnsWaiting } from "../../envd/process/handler/spawn-turns.js";
import { SELF } from "../helpers/accounts.js";

/** A Connect envelope: flags, big-endian length, JSON. */
function envelope(message: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
}

/** process.Process/Start over Connect JSON on HTTP/1.1: the stdout and exit code; `onStart` when the start event comes. */
function startStream(
  agent: http.Agent,
  script: string,
  onStart: () => void,
  onHeaders: () => void = () => {},
): Promise<{ out: string; exit: number | undefined }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        agent,
        method: "POST",
        path: "/process.Process/Start",
        headers: { host: `${ENVD_PORT}-sandbox`, "content-type": "application/connect+json", "connect-protocol-version": "1" },
      },
      (res) => {
        onHeaders();
        let buf = Buffer.alloc(0);
        let out = "";
        let exit: number | undefined;
        res.on("data", (chunk: Buffer) => {
          buf = Buffer.concat([buf, chunk]);
          while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
            const len = buf.readUInt32BE(1);
            const flags = buf[0]!;
            const msg = JSON.parse(buf.subarray(5, 5 + len).toString()) as {
              event?: { start?: unknown; data?: { stdout?: string }; end?: { exitCode?: number } };
              error?: unknown;
            };
            buf = buf.subarray(5 + len);
            if (flags & 2) {
              if (msg.error) reject(new Error(JSON.stringify(msg.error)));
              continue;
            }
            if (msg.event?.start) onStart();
            if (msg.event?.data?.stdout) out += Buffer.from(msg.event.data.stdout, "base64").toString();
            if (msg.event?.end) exit = msg.event.end.exitCode ?? 0;
          }
        });
        res.on("end", () => resolve({ out, exit }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(envelope({ process: { cmd: "/bin/sh", args: ["-c", script] } }));
  });
}

describe("envd under a burst of Start streams", () => {
  let envd: RunningEnvd;
  let dir: string;
  let socket: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "locale2b-burst-"));
    socket = join(dir, "envd.sock");
    envd = await startEnvd({ listen: [`unix+vsock://${socket}`], defaultUser: SELF.name });
  });
  afterAll(async () => {
    await envd?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** GET /health over `agent` (by default a fresh connection: its own hybrid-vsock handshake). */
  function health(agent = new HybridVsockAgent(socket, ENVD_PORT), keep = false): Promise<number> {
    return new Promise((resolve, reject) => {
      http
        .get({ agent, path: "/health", headers: { host: `${ENVD_PORT}-sandbox` } }, (res) => {
          res.resume();
          res.on("end", () => {
            if (!keep) agent.destroy();
            resolve(res.statusCode ?? 0);
          });
        })
        .on("error", reject);
    });
  }

  it("accepts every stream (response headers) and answers a new connection's handshake between the burst's forks; every output whole and in order", async () => {
    const n = 200;
    const lines = 10;
    // The burst's connections are opened (handshakes done) first, so its requests reach envd together.
    const agent = new HybridVsockAgent(socket, ENVD_PORT);
    agent.maxFreeSockets = n;
    await Promise.all(Array.from({ length: n }, () => health(agent, true)));
    let starts = 0;
    let headers = 0;
    let startsWhenAllAccepted = -1;
    let firstStart!: () => void;
    const underWay = new Promise<void>((r) => (firstStart = r));
    // Raw Connect JSON streams (as the SDKs send them), each on one of the open connections at once.
    const runs = Array.from({ length: n }, (_, i) =>
      startStream(agent, `for j in $(seq 1 ${lines}); do echo ${i}:$j; done`, () => {
        if (++starts === 1) firstStart();
      }, () => {
        if (++headers === n) startsWhenAllAccepted = starts;
      }),
    );

    // The burst is under way (envd is forking): a new connection is served between two forks.
    await underWay;
    let waitingWhenServed = 0;
    const answered = health().then((status) => {
      waitingWhenServed = spawnsWaiting();
      return status;
    });
    expect(await answered).toBe(204);
    const startedWhenHealthAnswered = starts;
    const results = await Promise.all(runs);
    agent.destroy();

    // The new connection's handshake and request were answered before the burst's processes were all spawned.
    expect(startedWhenHealthAnswered).toBeLessThan(n);
    expect(waitingWhenServed).toBeGreaterThan(0);
    expect(starts).toBe(n);
    // Every stream was accepted (its response headers came) while most of the burst's forks still waited.
    expect(startsWhenAllAccepted).toBeGreaterThanOrEqual(0);
    expect(startsWhenAllAccepted).toBeLessThan(n / 2);
    results.forEach((r, i) => {
      expect(r.exit).toBe(0);
      expect(r.out).toBe(Array.from({ length: lines }, (_, j) => `${i}:${j + 1}\n`).join(""));
    });
  });
});
