import { Sandbox, Secret } from "e2b";
import { startNamedPeer, type NamedPeer } from "../test/helpers/named-peer.js";
import { startControlPlaneChild, type ControlPlaneChild } from "./lib/control-plane.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable, verdict } from "./lib/report.js";
import { median, p95 } from "./lib/stats.js";

/**
 * `npm run bench -- egress`: HTTPS requests from inside a sandbox (process
 * runtime) to a test server in a network namespace of the bench's own
 * (test/helpers/named-peer.ts), each on a new connection: through the egress
 * proxy (the server reached by an allowOut host name: nft DNAT, conntrack
 * lookup, ClientHello peek, a DNS check, then passthrough) against direct
 * (the same server process at an address allowOut lists, so nft lets it
 * through without the proxy), in the same sandbox, interleaved in rounds.
 * A second sandbox has a network rule for the name (network.rules: a header
 * with a secret's placeholder), so the proxy intercepts: TLS terminated with
 * the egress CA, the header set (the secret looked up per request), its own
 * verified TLS to the server; compared with the first sandbox's direct path.
 * The client is a Python script in the sandbox: per request, the time from
 * connect() to the first byte of the answer, and the request rate.
 */

const GOAL_RATIO = 1.1;
const GOAL_INTERCEPT_RATIO = 1.5;
const NAME = "bench.allowed.test";

/** The client in the sandbox: `n` requests to `address`:8443 with SNI NAME; prints the first-byte times (ms) and the total. */
const CLIENT = `
import socket, ssl, sys, time, json
address, n = sys.argv[1], int(sys.argv[2])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
req = ("GET / HTTP/1.1\\r\\nHost: ${NAME}\\r\\nConnection: close\\r\\n\\r\\n").encode()
firsts = []
t0 = time.perf_counter()
for i in range(n):
    s = time.perf_counter()
    raw = socket.create_connection((address, 8443))
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = ctx.wrap_socket(raw, server_hostname="${NAME}")
    c.sendall(req)
    first = c.recv(1)
    firsts.append((time.perf_counter() - s) * 1000)
    while c.recv(65536): pass
    c.close()
    if not first: sys.exit("empty answer")
print(json.dumps({"firsts": firsts, "total": (time.perf_counter() - t0) * 1000}))
`;

interface Round {
  firsts: number[];
  total: number;
}

export async function benchEgress(): Promise<GoalResult[]> {
  const n = envInt("LOCALE2B_BENCH_EGRESS_N", 200);
  const rounds = envInt("LOCALE2B_BENCH_EGRESS_ROUNDS", 6);
  heading(`egress proxy: HTTPS to a test host, a new connection per request (${rounds} interleaved rounds of ${Math.ceil(n / rounds)} per path)`);
  let peer: NamedPeer | undefined;
  let cp: ControlPlaneChild | undefined;
  const saved = { ...process.env };
  try {
    peer = await startNamedPeer([NAME], (p) => ({ [NAME]: p.b }));
    cp = await startControlPlaneChild({ env: { LOCALE2B_DNS: peer.a, LOCALE2B_LOG_LEVEL: "warn", LOCALE2B_EGRESS_UPSTREAM_CA: peer.caFile } });
    Object.assign(process.env, { E2B_API_URL: cp.url, E2B_SANDBOX_URL: cp.url, E2B_API_KEY: cp.apiKey });
    delete process.env.E2B_DOMAIN;
    delete process.env.E2B_DEBUG;
    const s = await Sandbox.create("base", { network: { allowOut: [NAME, `${peer.c}/32`], denyOut: ["0.0.0.0/0"] }, timeoutMs: 600_000 });
    cp.live.add(s.sandboxId);
    await Secret.create("bench-key", "sk-bench-not-a-real-key");
    const rules = { [NAME]: [{ transform: { headers: { Authorization: `Bearer ${Secret.fill("bench-key")}` } } }] };
    const si = await Sandbox.create("base", { network: { rules }, timeoutMs: 600_000 });
    cp.live.add(si.sandboxId);
    await s.files.write("/tmp/client.py", CLIENT);
    await si.files.write("/tmp/client.py", CLIENT);
    const run = async (sbx: Sandbox, address: string, count: number): Promise<Round> =>
      JSON.parse((await sbx.commands.run(`python3 /tmp/client.py ${address} ${count}`, { timeoutMs: 300_000 })).stdout) as Round;
    // Warm up every path (DNS cache, TLS session machinery, the leaf certificate, page cache).
    const per = Math.ceil(n / rounds);
    const paths = { direct: () => run(s, peer!.c, per), proxied: () => run(s, peer!.b, per), intercepted: () => run(si, peer!.b, per) };
    await run(s, peer.b, 10);
    await run(s, peer.c, 10);
    await run(si, peer.b, 10);
    const got = { direct: { firsts: [] as number[], total: 0 }, proxied: { firsts: [] as number[], total: 0 }, intercepted: { firsts: [] as number[], total: 0 } };
    const order = Object.keys(paths) as (keyof typeof paths)[];
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < order.length; i++) {
        const path = order[(i + r) % order.length]!;
        const round = await paths[path]();
        got[path].firsts.push(...round.firsts);
        got[path].total += round.total;
      }
    }
    const rate = (g: { firsts: number[]; total: number }) => (g.firsts.length * 1000) / g.total;
    const rows = (["direct", "proxied", "intercepted"] as const).map((k) => [k, fmtMs(median(got[k].firsts)), fmtMs(p95(got[k].firsts)), `${rate(got[k]).toFixed(0)}/s`]);
    printTable(["path", "first byte (median)", "first byte (p95)", "requests"], rows);
    const latency = median(got.proxied.firsts) / median(got.direct.firsts);
    const slower = rate(got.direct) / rate(got.proxied);
    console.log(`proxied/direct: first byte ${fmtRatio(latency)} (goal <= ${GOAL_RATIO}x: ${verdict(latency <= GOAL_RATIO)}), request rate ${fmtRatio(1 / slower)} of direct (goal time per request <= ${GOAL_RATIO}x: ${verdict(slower <= GOAL_RATIO)})`);
    const iLatency = median(got.intercepted.firsts) / median(got.direct.firsts);
    const iSlower = rate(got.direct) / rate(got.intercepted);
    console.log(`intercepted/direct: first byte ${fmtRatio(iLatency)} (goal <= ${GOAL_INTERCEPT_RATIO}x: ${verdict(iLatency <= GOAL_INTERCEPT_RATIO)}), request rate ${fmtRatio(1 / iSlower)} of direct (goal time per request <= ${GOAL_INTERCEPT_RATIO}x: ${verdict(iSlower <= GOAL_INTERCEPT_RATIO)})`);
    for (const sbx of [s, si]) {
      await sbx.kill();
      cp.live.delete(sbx.sandboxId);
    }
    await Secret.destroy("bench-key");
    return [
      { benchmark: "egress", metric: "HTTPS first byte on a new connection, proxied / direct (median)", value: fmtRatio(latency), goal: `<= ${GOAL_RATIO}x`, ok: latency <= GOAL_RATIO },
      { benchmark: "egress", metric: "HTTPS requests per second, direct / proxied", value: fmtRatio(slower), goal: `<= ${GOAL_RATIO}x`, ok: slower <= GOAL_RATIO },
      { benchmark: "egress", metric: "HTTPS first byte on a new connection, intercepted (network.rules) / direct (median)", value: fmtRatio(iLatency), goal: `<= ${GOAL_INTERCEPT_RATIO}x`, ok: iLatency <= GOAL_INTERCEPT_RATIO },
      { benchmark: "egress", metric: "HTTPS requests per second, direct / intercepted", value: fmtRatio(iSlower), goal: `<= ${GOAL_INTERCEPT_RATIO}x`, ok: iSlower <= GOAL_INTERCEPT_RATIO },
    ];
  } finally {
    for (const k of ["E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DOMAIN", "E2B_DEBUG"]) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
    await cp?.stop();
    await peer?.close();
  }
}
