import http from "node:http";
import net from "node:net";
import { startControlPlaneChild } from "./lib/control-plane.js";
import { freePort } from "./lib/envd.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtBytes, fmtRate, fmtRatio, heading, printTable, verdict } from "./lib/report.js";
import { MiB, proxyClient } from "./lib/sandboxes.js";
import { median, mibPerSec, msSince } from "./lib/stats.js";

/**
 * `npm run bench -- ports`: a server the user runs in a sandbox (process
 * runtime), reached through the control plane as E2B's getHost(port) does
 * (Host `<port>-<id>.localhost`, envd's port forwarder) against the same
 * server reached directly on 127.0.0.1 (the sandbox shares the host's
 * network): response throughput, small-request latency over keep-alive, and
 * the round trip of a message through an upgraded (WebSocket-style)
 * connection. The direct numbers are the baseline measured in the same run.
 */

const GOAL_THROUGHPUT_RATIO = 0.5;
const GOAL_RTT_OVERHEAD_MS = 2;

// The server in the sandbox: /bytes?n= streams n bytes, /hello answers "hi", an Upgrade echoes bytes.
const SERVER = `
const http = require("node:http");
const chunk = Buffer.alloc(256 * 1024, 97);
const s = http.createServer((req, res) => {
  const n = Number(new URL(req.url, "http://x").searchParams.get("n") || 0);
  if (!n) return res.end("hi");
  let left = n;
  const more = () => { while (left > 0) { const c = left >= chunk.length ? chunk : chunk.subarray(0, left); left -= c.length; if (!res.write(c)) return res.once("drain", more); } res.end(); };
  more();
});
s.on("upgrade", (req, socket) => { socket.write("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n"); socket.setNoDelay(true); socket.pipe(socket); });
s.listen(Number(process.argv[1]), "127.0.0.1", () => console.log("listening"));
`;

const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 4 });

function get(url: string, host: string | undefined, sink = false): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: keepAlive, headers: host ? { host } : {} }, (res) => {
      let n = 0;
      res.on("data", (c: Buffer) => (n += c.length));
      res.on("end", () => (res.statusCode === 200 ? resolve(n) : reject(new Error(`GET ${url} (${host}): ${res.statusCode}`))));
      res.on("error", reject);
      if (sink) res.resume();
    });
    req.on("error", reject);
  });
}

/** An upgraded connection: resolves once the 101 head has been read. */
function openEcho(port: number, host: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, "127.0.0.1");
    s.setNoDelay(true);
    s.on("error", reject);
    s.write(`GET /echo HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`);
    let seen = "";
    const onData = (d: Buffer) => {
      seen += d.toString("latin1");
      if (!seen.includes("\r\n\r\n")) return;
      s.off("data", onData);
      if (!seen.startsWith("HTTP/1.1 101")) return reject(new Error(`no upgrade: ${seen.split("\r\n")[0]}`));
      resolve(s);
    };
    s.on("data", onData);
  });
}

/** Median round trip of a 1-byte message over an echo connection. */
async function echoRtt(s: net.Socket, n: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      s.once("data", () => resolve());
      s.write("x");
    });
    times.push(msSince(t0));
  }
  return median(times);
}

export async function benchPorts(): Promise<GoalResult[]> {
  const bytes = envInt("LOCALE2B_BENCH_PORT_BYTES", 256 * MiB);
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  const n = envInt("LOCALE2B_BENCH_PORT_N", 500);
  heading(`ports: a server in the sandbox through getHost(port) vs directly (${fmtBytes(bytes)} x ${reps}, ${n} small requests and echo round trips)`);
  const cp = await startControlPlaneChild();
  try {
    const sb = await cp.createSandbox();
    const port = await freePort();
    const client = proxyClient(cp, sb);
    // Started in the background: the stream stays open while the server runs.
    const started = (async () => {
      for await (const _ of client.start({ process: { cmd: process.execPath, args: ["-e", SERVER, String(port)] }, stdin: false }));
    })().catch(() => undefined);
    const cpPort = Number(new URL(cp.url).port);
    const host = `${port}-${sb.id}.localhost:${cpPort}`;
    const direct = { name: "direct to 127.0.0.1:<port>", url: `http://127.0.0.1:${port}`, host: undefined as string | undefined, port, echoHost: "x" };
    const proxied = { name: "through the proxy (getHost)", url: `http://127.0.0.1:${cpPort}`, host, port: cpPort, echoHost: host };
    for (let i = 0; ; i++) {
      if (await get(`${proxied.url}/`, host).then(() => true, () => false)) break;
      if (i > 200) throw new Error("the server in the sandbox did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
    const rows: string[][] = [];
    const results: Record<string, { rate: number; req: number; rtt: number }> = {};
    for (const v of [direct, proxied]) {
      const rates: number[] = [];
      await get(`${v.url}/bytes?n=${16 * MiB}`, v.host, true);
      for (let r = 0; r < reps; r++) {
        globalThis.gc?.();
        const t0 = performance.now();
        const got = await get(`${v.url}/bytes?n=${bytes}`, v.host, true);
        if (got !== bytes) throw new Error(`${v.name}: got ${got} of ${bytes} bytes`);
        rates.push(mibPerSec(bytes, msSince(t0)));
      }
      const times: number[] = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        await get(`${v.url}/`, v.host);
        times.push(msSince(t0));
      }
      const s = await openEcho(v.port, v.echoHost);
      await echoRtt(s, 20);
      const rtt = await echoRtt(s, n);
      s.destroy();
      results[v.name] = { rate: median(rates), req: median(times), rtt };
      rows.push([v.name, fmtRate(median(rates)), `${median(times).toFixed(2)} ms`, `${rtt.toFixed(3)} ms`]);
    }
    printTable(["path", "GET throughput p50", "small GET p50", "echo round trip p50"], rows);
    const d = results[direct.name]!;
    const p = results[proxied.name]!;
    const ratio = p.rate / d.rate;
    const overhead = p.rtt - d.rtt;
    console.log(
      `proxied/direct: throughput ${fmtRatio(ratio)} (goal >= ${GOAL_THROUGHPUT_RATIO}x: ${verdict(ratio >= GOAL_THROUGHPUT_RATIO)}), ` +
        `small GET ${fmtRatio(p.req / d.req)}, echo round trip +${overhead.toFixed(3)} ms (goal <= ${GOAL_RTT_OVERHEAD_MS} ms: ${verdict(overhead <= GOAL_RTT_OVERHEAD_MS)})`,
    );
    void started;
    return [
      { benchmark: "ports", metric: "user-port GET throughput, proxied / direct", value: fmtRatio(ratio), goal: `>= ${GOAL_THROUGHPUT_RATIO}x`, ok: ratio >= GOAL_THROUGHPUT_RATIO },
      { benchmark: "ports", metric: "WebSocket-style echo round trip, added by the proxy", value: `${overhead.toFixed(3)} ms`, goal: `<= ${GOAL_RTT_OVERHEAD_MS} ms`, ok: overhead <= GOAL_RTT_OVERHEAD_MS },
    ];
  } finally {
    keepAlive.destroy();
    await cp.stop();
  }
}
