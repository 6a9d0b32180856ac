// A test host in a network namespace of the test's own, joined to this host
// by a veth pair on a /29 of 198.18.0.0/16 (RFC 2544's benchmarking range;
// three addresses on its side): a destination sandboxes may reach through the
// host's forwarding and NAT, standing in for "the internet" (sandboxes may not
// reach the host itself). With `range: "private"` the /29 is in 10.203.0.0/16
// instead: private space, which no sandbox reaches unless its server opens it.
// It answers HTTP GET / with `peer-ok <address it was reached at>`.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import http from "node:http";

export interface PeerHost {
  /** Three addresses of the peer (all serve `port`). */
  a: string;
  b: string;
  c: string;
  port: number;
  close(): Promise<void>;
}

const SERVER = `
const http = require("node:http");
http.createServer((req, res) => res.end("peer-ok " + req.socket.localAddress)).listen(8080, "0.0.0.0", () => console.log("ready"));
`;

function ip(args: string[]): void {
  execFileSync("ip", args, { stdio: "pipe" });
}

function get(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http.get(url, { timeout: 2000 }, (res) => {
      let body = "";
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve(body));
    }).on("error", reject);
  });
}

/**
 * `servers`: extra servers started in the peer's namespace beside the HTTP
 * one (a script for `node -e`, given the peer's addresses as PEER_A/B/C and
 * `env`, that prints one line when it is ready).
 */
export async function startPeerHost(servers?: { script: string; env?: Record<string, string> }, o: { range?: "public" | "private" } = {}): Promise<PeerHost> {
  const tag = randomBytes(3).toString("hex");
  const ns = `l2btest-${tag}`;
  const dev = `lbt${tag}`;
  const net = Number.parseInt(tag.slice(0, 4), 16) % 8000; // a /29 of a /16
  const base = net * 8;
  const prefix = o.range === "private" ? "10.203" : "198.18";
  const addr = (n: number) => `${prefix}.${base >> 8}.${(base & 255) + n}`;
  ip(["netns", "add", ns]);
  let server: ChildProcess | undefined;
  let extra: ChildProcess | undefined;
  const close = async () => {
    server?.kill("SIGKILL");
    extra?.kill("SIGKILL");
    try {
      ip(["link", "del", dev]);
    } catch {
      // gone with the namespace
    }
    try {
      ip(["netns", "del", ns]);
    } catch {
      // already gone
    }
  };
  try {
    ip(["link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", ns]);
    ip(["addr", "add", `${addr(1)}/29`, "dev", dev]);
    ip(["link", "set", dev, "up"]);
    for (const a of [addr(2), addr(3), addr(4)]) ip(["-n", ns, "addr", "add", `${a}/29`, "dev", "eth0"]);
    ip(["-n", ns, "link", "set", "eth0", "up"]);
    ip(["-n", ns, "link", "set", "lo", "up"]);
    ip(["-n", ns, "route", "add", "default", "via", addr(1)]);
    server = spawn("ip", ["netns", "exec", ns, process.execPath, "-e", SERVER], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve, reject) => {
      server!.stdout!.once("data", () => resolve());
      server!.once("exit", (code) => reject(new Error(`the peer host's server exited (${code})`)));
    });
    if (servers) {
      const env = { ...process.env, ...servers.env, PEER_A: addr(2), PEER_B: addr(3), PEER_C: addr(4) };
      extra = spawn("ip", ["netns", "exec", ns, process.execPath, "-e", servers.script], { stdio: ["ignore", "pipe", "inherit"], env });
      await new Promise<void>((resolve, reject) => {
        extra!.stdout!.once("data", () => resolve());
        extra!.once("exit", (code) => reject(new Error(`the peer host's extra servers exited (${code})`)));
      });
    }
    const body = await get(`http://${addr(2)}:8080/`);
    if (!body.startsWith("peer-ok")) throw new Error(`the peer host answered ${body}`);
  } catch (err) {
    await close();
    throw err;
  }
  return { a: addr(2), b: addr(3), c: addr(4), port: 8080, close };
}
