// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// envd's user-port forwarder (envd/server/port-forward.ts) on its unix+vsock
// listener, dialled as the control plane does (dialGuestPort): it connects to
// a port only when a process of the sandbox owns the listening socket. Here
// envd runs in the test's own process, outside any pid namespace, so "the
// sandbox" is envd's process and its descendants.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listeningOn } from "../../envd/server/port-forward.js";
import { dialGuestPort, dialHybridVsock, FORWARD_PORT } from "../../control-plane/transport/hybrid-vsock.js";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { waitFor } from "../helpers/sdk.js";

let envd: TestEnvd;
let dir: string;
let sock: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "l2b-fwd-"));
  sock = join(dir, "envd.sock");
  envd = await startTestEnvd({ listen: [`unix+vsock://${sock}`] });
});
afterAll(async () => {
  await envd?.close();
  rmSync(dir, { recursive: true, force: true });
});

function listen(host: string): Promise<{ server: http.Server; port: number }> {
  const server = http.createServer((req, res) => res.end(`served ${req.url}`));
  return new Promise((resolve, reject) => {
    server.on("error", reject);
    server.listen(0, host, () => resolve({ server, port: (server.address() as net.AddressInfo).port }));
  });
}

/** One HTTP/1.1 request over an already connected socket; the whole response as text. */
async function httpOver(socket: net.Socket, path: string): Promise<string> {
  socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  let reply = "";
  for await (const c of socket) reply += c;
  return reply;
}

/** A raw forwarder exchange: what envd answers to `line`. */
async function ask(line: string): Promise<string> {
  const s = await dialHybridVsock(sock, FORWARD_PORT);
  s.write(line);
  let reply = "";
  for await (const c of s) reply += c;
  return reply;
}

describe("envd's port forwarder", () => {
  it("finds listening sockets in /proc/net/tcp and tcp6, with the address to dial", async () => {
    const v4 = await listen("127.0.0.1");
    const any6 = await listen("::");
    const lo6 = await listen("::1");
    try {
      expect(listeningOn(v4.port).map((l) => l.host)).toEqual(["127.0.0.1"]);
      expect(listeningOn(any6.port).map((l) => l.host)).toEqual(["::1"]);
      expect(listeningOn(lo6.port).map((l) => l.host)).toEqual(["0:0:0:0:0:0:0:1"]);
      expect(listeningOn(v4.port)[0]!.inode).toMatch(/^\d+$/);
    } finally {
      for (const s of [v4, any6, lo6]) s.server.close();
    }
  });

  it("connects to a port a process of the sandbox listens on, over IPv4 and IPv6", async () => {
    for (const host of ["127.0.0.1", "::1"]) {
      const { server, port } = await listen(host);
      try {
        const s = await dialGuestPort(sock, port);
        expect(await httpOver(s, "/hi")).toMatch(/^HTTP\/1\.1 200 [\s\S]*served \/hi$/);
      } finally {
        server.close();
      }
    }
  });

  it("refuses a closed port, a port held by a process outside the sandbox, and bad requests", async () => {
    const closed = await listen("127.0.0.1");
    closed.server.close();
    await expect(dialGuestPort(sock, closed.port)).rejects.toThrow(`port ${closed.port} in the sandbox: connection refused`);

    // A server that is not envd's descendant: started detached by a shell that exits at once, so it is
    // reparented away from this process tree (as a host service would be).
    const outside = await new Promise<number>((resolve, reject) => {
      const probe = net.createServer();
      probe.listen(0, "127.0.0.1", () => {
        const p = (probe.address() as net.AddressInfo).port;
        probe.close(() => resolve(p));
      });
      probe.on("error", reject);
    });
    const script = `require("node:http").createServer((q, s) => s.end("outside")).listen(${outside}, "127.0.0.1"); setTimeout(() => process.exit(0), 60000);`;
    const sh = spawn("/bin/sh", ["-c", `setsid ${JSON.stringify(process.execPath)} -e '${script}' >/dev/null 2>&1 & echo $!`], { stdio: ["ignore", "pipe", "inherit"] });
    let pid = "";
    sh.stdout.on("data", (d: Buffer) => (pid += d));
    await new Promise((r) => sh.on("close", r));
    try {
      await waitFor(() => listeningOn(outside).length > 0, `the outside server on ${outside}`);
      await expect(dialGuestPort(sock, outside)).rejects.toThrow(/the process listening there is not in this sandbox/);
    } finally {
      process.kill(Number(pid), "SIGKILL");
    }

    expect(await ask("TCP abc\n")).toBe("ERR bad request\n");
    expect(await ask("TCP 0\n")).toBe("ERR bad request\n");
    expect(await ask("TCP 70000\n")).toBe("ERR bad request\n");
    expect(await ask(`${"x".repeat(100)}`)).toBe("ERR bad request\n");
    // envd still serves afterwards.
    const health = await dialHybridVsock(sock, 49983);
    expect(await httpOver(health, "/health")).toMatch(/^HTTP\/1\.1 204/);
  });
});
