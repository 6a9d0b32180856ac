import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { tmpdir } from "node:os";
import tls from "node:tls";
import { join } from "node:path";
import { Process } from "../gen/ts/process/process_pb.js";
import { startControlPlaneChild, type ControlPlaneChild, type SandboxHandle } from "./lib/control-plane.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtBytes, fmtRate, fmtRatio, heading, printTable, verdict } from "./lib/report.js";
import { MiB, startTrue } from "./lib/sandboxes.js";
import { median, mibPerSec, msSince, p95 } from "./lib/stats.js";

/**
 * `npm run bench -- tls`: the same control plane (process runtime) served
 * in clear text and with `--tls-cert/--tls-key` (a test CA made with openssl,
 * an EC P-256 certificate), both running at once, measured interleaved:
 * the exec round trip (Start /bin/true through the envd proxy) over
 * HTTP/1.1 and over HTTP/2 (h2c vs h2 by ALPN: what the E2B SDK speaks on
 * https://), and a large download through the proxy (envd's GET /files of a
 * file in the sandbox, HTTP/1.1 keep-alive). Clear text is the baseline.
 */

const GOAL_EXEC_RATIO = 1.1;
const GOAL_DOWNLOAD_RATIO = 0.8;

/** A CA and a certificate for 127.0.0.1 and *.localhost, made with openssl in `dir`. */
function makeCertificate(dir: string): { cert: string; key: string; ca: Buffer } {
  const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run(["req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=locale2b bench CA"]);
  run(["req", ...ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"]);
  writeFileSync(join(dir, "ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:sandbox.localhost,DNS:*.sandbox.localhost\n");
  run(["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-set_serial", "1", "-days", "1", "-extfile", "ext.cnf", "-out", "server.crt"]);
  return { cert: join(dir, "server.crt"), key: join(dir, "server.key"), ca: readFileSync(join(dir, "ca.crt")) };
}

/**
 * An https agent whose sockets send at once (TCP_NODELAY), as undici's (the
 * SDK's) do: Node 20's https.Agent leaves Nagle on, and each small request
 * then waits for the server's delayed ACK (about 40 ms).
 */
function httpsAgent(ca: Buffer): https.Agent {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 4, ca });
  const create = agent.createConnection.bind(agent);
  agent.createConnection = ((opts: tls.ConnectionOptions, cb: () => void) => {
    const socket = (create as (o: tls.ConnectionOptions, c: () => void) => tls.TLSSocket)(opts, cb);
    socket.setNoDelay(true);
    return socket;
  }) as typeof agent.createConnection;
  return agent;
}

/** An HTTP/2 connection over TLS (ALPN h2) with TCP_NODELAY, for connect-node's session manager. */
function h2Connection(ca: Buffer): (authority: URL) => tls.TLSSocket {
  return (authority) => {
    const socket = tls.connect({ host: authority.hostname, port: Number(authority.port), ca, ALPNProtocols: ["h2"] });
    socket.setNoDelay(true);
    return socket;
  };
}

interface Side {
  name: string;
  cp: ControlPlaneChild;
  sb: SandboxHandle;
  /** Keep-alive agent for /files downloads (HTTP/1.1). */
  agent: http.Agent;
  h1: Client<typeof Process>;
  h2: Client<typeof Process>;
}

function client(cp: ControlPlaneChild, sb: SandboxHandle, httpVersion: "1.1" | "2", agent: http.Agent, ca?: Buffer): Client<typeof Process> {
  const addHeaders: Interceptor = (next) => (req) => {
    for (const [k, v] of Object.entries(sb.proxyHeaders)) req.header.set(k, v);
    return next(req);
  };
  const common = { baseUrl: cp.url, acceptCompression: [], interceptors: [addHeaders] };
  return createClient(
    Process,
    httpVersion === "1.1"
      ? createConnectTransport({ ...common, httpVersion, nodeOptions: { agent } })
      : createConnectTransport({ ...common, httpVersion, nodeOptions: ca ? { ca, createConnection: h2Connection(ca) } : {} }),
  );
}

/** GET /files?path= through the proxy, counting bytes, never holding them. */
function download(side: Side, path: string): Promise<number> {
  const secure = side.cp.url.startsWith("https:");
  return new Promise((resolve, reject) => {
    const req = (secure ? https : http).get(
      `${side.cp.url}/files?path=${encodeURIComponent(path)}`,
      { agent: side.agent, headers: side.sb.proxyHeaders },
      (res) => {
        let n = 0;
        res.on("data", (c: Buffer) => (n += c.length));
        res.on("end", () => (res.statusCode === 200 ? resolve(n) : reject(new Error(`GET /files on ${side.name}: ${res.statusCode}`))));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
  });
}

async function execTimes(c: Client<typeof Process>, n: number, times: number[]): Promise<void> {
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await startTrue(c);
    times.push(msSince(t0));
  }
}

export async function benchTls(): Promise<GoalResult[]> {
  const bytes = envInt("LOCALE2B_BENCH_BYTES", 1024 * MiB);
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  const n = envInt("LOCALE2B_BENCH_EXEC_N", 200);
  const warmup = envInt("LOCALE2B_BENCH_WARMUP", 20);
  heading(`tls: the control plane over TLS vs clear text (exec round trip x ${n} per protocol, ${fmtBytes(bytes)} download x ${reps}, interleaved)`);
  const dir = mkdtempSync(join(tmpdir(), "locale2b-bench-tls-"));
  const sides: Side[] = [];
  try {
    const pem = makeCertificate(dir);
    for (const [name, tls] of [["clear text", undefined], ["TLS", pem]] as const) {
      const cp = await startControlPlaneChild({ ...(tls ? { tls } : {}), extraArgs: ["--warm-pool", "0"] });
      const side = { name, cp } as Side;
      sides.push(side);
      side.sb = await cp.createSandbox();
      side.agent = tls ? httpsAgent(tls.ca) : new http.Agent({ keepAlive: true, maxSockets: 4 });
      side.h1 = client(cp, side.sb, "1.1", side.agent);
      side.h2 = client(cp, side.sb, "2", side.agent, tls?.ca);
    }
    const [plain, secure] = sides as [Side, Side];
    // The file to download, in each sandbox (sparse: reading it costs no disk).
    for (const s of sides) {
      for await (const _ of s.h1.start({ process: { cmd: "/usr/bin/truncate", args: ["-s", String(bytes), "/tmp/big"] }, stdin: false }));
    }

    // Exec round trips, alternating sides in batches of 20 so both see the same machine.
    const exec: Record<string, number[]> = {};
    for (const proto of ["h1", "h2"] as const) {
      for (const s of sides) {
        await execTimes(s[proto], warmup, []);
        exec[`${s.name} ${proto}`] = [];
      }
      for (let done = 0; done < n; done += 20) {
        for (const s of sides) await execTimes(s[proto], Math.min(20, n - done), exec[`${s.name} ${proto}`]!);
      }
    }
    const rows: string[][] = [];
    const label = { "clear text h1": "clear text, HTTP/1.1", "TLS h1": "TLS, HTTP/1.1", "clear text h2": "clear text, h2c", "TLS h2": "TLS, h2 (ALPN; the SDK on https://)" } as Record<string, string>;
    for (const k of ["clear text h1", "TLS h1", "clear text h2", "TLS h2"]) {
      const t = exec[k]!;
      rows.push([label[k]!, `${median(t).toFixed(2)} ms`, `${p95(t).toFixed(2)} ms`]);
    }
    printTable(["exec round trip (Start /bin/true)", "p50", "p95"], rows);
    const ratioH1 = median(exec["TLS h1"]!) / median(exec["clear text h1"]!);
    const ratioH2 = median(exec["TLS h2"]!) / median(exec["clear text h2"]!);

    // Downloads, alternating sides.
    const rates: Record<string, number[]> = { [plain.name]: [], [secure.name]: [] };
    for (const s of sides) await download(s, "/tmp/big").then((got) => {
      if (got !== bytes) throw new Error(`${s.name}: downloaded ${got} of ${bytes} bytes`);
    });
    for (let r = 0; r < reps; r++) {
      for (const s of r % 2 ? [...sides].reverse() : sides) {
        globalThis.gc?.();
        const t0 = performance.now();
        const got = await download(s, "/tmp/big");
        if (got !== bytes) throw new Error(`${s.name}: downloaded ${got} of ${bytes} bytes`);
        rates[s.name]!.push(mibPerSec(bytes, msSince(t0)));
      }
    }
    printTable(
      ["GET /files through the proxy (HTTP/1.1)", "p50", "min..max"],
      sides.map((s) => [s.name, fmtRate(median(rates[s.name]!)), `${fmtRate(Math.min(...rates[s.name]!))}..${fmtRate(Math.max(...rates[s.name]!))}`]),
    );
    const ratioDl = median(rates[secure.name]!) / median(rates[plain.name]!);
    console.log(
      `TLS/clear: exec HTTP/1.1 ${fmtRatio(ratioH1)} (goal <= ${GOAL_EXEC_RATIO}x: ${verdict(ratioH1 <= GOAL_EXEC_RATIO)}), ` +
        `exec HTTP/2 ${fmtRatio(ratioH2)} (goal <= ${GOAL_EXEC_RATIO}x: ${verdict(ratioH2 <= GOAL_EXEC_RATIO)}), ` +
        `download ${fmtRatio(ratioDl)} (goal >= ${GOAL_DOWNLOAD_RATIO}x: ${verdict(ratioDl >= GOAL_DOWNLOAD_RATIO)})`,
    );
    return [
      { benchmark: "tls", metric: "exec round trip, TLS / clear text, HTTP/1.1", value: fmtRatio(ratioH1), goal: `<= ${GOAL_EXEC_RATIO}x`, ok: ratioH1 <= GOAL_EXEC_RATIO },
      { benchmark: "tls", metric: "exec round trip, TLS h2 / h2c", value: fmtRatio(ratioH2), goal: `<= ${GOAL_EXEC_RATIO}x`, ok: ratioH2 <= GOAL_EXEC_RATIO },
      { benchmark: "tls", metric: `${fmtBytes(bytes)} download through the proxy, TLS / clear text`, value: fmtRatio(ratioDl), goal: `>= ${GOAL_DOWNLOAD_RATIO}x`, ok: ratioDl >= GOAL_DOWNLOAD_RATIO },
    ];
  } finally {
    for (const s of sides) {
      s.agent?.destroy();
      await s.cp.stop();
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
