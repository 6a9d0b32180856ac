// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The guest init's user-port forwarder (vsock port 49982 in a VM; with
// --forward-ports in process mode): `CONNECT 49982`, `TCP <port>` -> `OK`,
// then a relay to 127.0.0.1:<port>, next to envd's port. Process mode, as in
// test/rootfs/init.test.ts; a VM shows it in test/vm/qemu-sdk.test.ts.
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureInitBinary } from "../../control-plane/images/guest-init.js";
import { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { ENVD_PORT } from "../../envd/version.js";
import {
  dialForward,
  fdCount,
  hasGcc,
  rawExchange,
  readAll,
  request,
  startInitWithEnvd,
  tcpServer,
  which,
  stopInit,
  type RunningInit,
} from "../helpers/guest-init.js";
import { waitFor } from "../helpers/wait.js";

const MiB = 1024 * 1024;

let work: string;
let binary: string;

beforeAll(async () => {
  if (!hasGcc) return;
  work = mkdtempSync(join(tmpdir(), "l2b-init-fwd-bin-"));
  binary = await ensureInitBinary(join(work, "images"));
});
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe.skipIf(!hasGcc)("guest init, process mode, port forwarding (--forward-ports)", () => {
  let dir: string;
  let init: RunningInit;
  let host: string;
  const servers: net.Server[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "l2b-init-fwd-"));
    host = join(dir, "host.sock");
    init = startInitWithEnvd(binary, dir, ["--envd-log", "warn", "--forward-ports"]);
    await init.waitForLog(/listening on unix:.*host\.sock \(hybrid vsock, ports 49983 and 49982\)/);
  });
  afterAll(async () => {
    for (const s of servers) s.close();
    await stopInit(init);
    rmSync(dir, { recursive: true, force: true });
  });

  async function echoServer(): Promise<number> {
    const { server, port } = await tcpServer((s) => s.pipe(s)); // ends its side once the client's EOF came
    servers.push(server);
    return port;
  }

  it("answers OK 49982, then OK once connected, keeping bytes sent before the OK", async () => {
    const port = await echoServer();
    // Handshake, request and the first bytes of the stream in one write.
    const s = net.createConnection(host);
    const all = readAll(s);
    s.end(`CONNECT 49982\nTCP ${port}\nhello, port ${port}`);
    expect(await all).toBe(`OK 49982\nOK\nhello, port ${port}`);
  });

  it("moves 16 MiB each way intact and passes the host's half-close on", async () => {
    const data = randomBytes(16 * MiB);
    const sum = createHash("sha256").update(data).digest("hex");
    let serverGot: Promise<{ hash: string; bytes: number }> | undefined;
    const { server, port } = await tcpServer((s) => {
      const h = createHash("sha256");
      let bytes = 0;
      serverGot = new Promise((resolve) =>
        s.on("end", () => {
          resolve({ hash: h.digest("hex"), bytes });
          s.end(`\nthe end (${bytes} bytes)`); // an answer after the client's EOF: a half-close reached us
        }),
      );
      s.on("data", (c: Buffer) => {
        h.update(c);
        bytes += c.length;
        s.write(c);
      });
    });
    servers.push(server);
    const s = await dialForward(host, port);
    const h = createHash("sha256");
    const chunks: Buffer[] = [];
    const done = new Promise<void>((resolve, reject) => {
      s.on("data", (c: Buffer) => chunks.push(c));
      s.on("end", resolve);
      s.on("error", reject);
    });
    s.resume();
    s.end(data);
    await done;
    const got = Buffer.concat(chunks);
    expect(await serverGot).toEqual({ hash: sum, bytes: data.length });
    expect(got.length).toBe(data.length + `\nthe end (${data.length} bytes)`.length);
    expect(h.update(got.subarray(0, data.length)).digest("hex")).toBe(sum);
    expect(got.subarray(data.length).toString()).toBe(`\nthe end (${data.length} bytes)`);
  });

  it("passes the server's half-close on, and still relays what the host sends after it", async () => {
    let serverGot: Promise<string> | undefined;
    const { server, port } = await tcpServer((s) => {
      s.end("bye first\n"); // the server stops writing at once but keeps reading
      serverGot = readAll(s);
    });
    servers.push(server);
    const s = new net.Socket({ allowHalfOpen: true });
    await new Promise<void>((resolve) => s.connect(host, resolve));
    const all = readAll(s);
    s.write(`CONNECT 49982\nTCP ${port}\n`);
    expect((await all).split("\n")).toEqual(["OK 49982", "OK", "bye first", ""]); // EOF reached the host
    s.end("still heard\n");
    expect(await serverGot).toBe("still heard\n");
  });

  it("answers ERR <port>: connection refused for a port nothing listens on", async () => {
    const { server, port } = await tcpServer(() => {});
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const r = await rawExchange(host, `CONNECT 49982\nTCP ${port}\n`);
    expect(r.data).toBe(`OK 49982\nERR ${port}: connection refused\n`);
    await expect(dialForward(host, port)).rejects.toThrow(new RegExp(`forwarder answered 'ERR ${port}: connection refused'`));
  });

  const python = which("python3");
  it.skipIf(!python)("answers ERR <port>: timed out when the connect takes more than 10 s", async () => {
    // A listener that never accepts, its backlog full: further SYNs are dropped and the connect hangs.
    const py = spawn(python!, ["-c", "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(60)"]);
    const fill: net.Socket[] = [];
    try {
      const port = await new Promise<number>((resolve) => py.stdout.once("data", (d: Buffer) => resolve(Number(d.toString().trim()))));
      for (let i = 0; i < 3; i++) fill.push(net.createConnection(port, "127.0.0.1").on("error", () => {}));
      await new Promise((r) => setTimeout(r, 300));
      const t0 = Date.now();
      const r = await rawExchange(host, `CONNECT 49982\nTCP ${port}\n`);
      expect(r.data).toBe(`OK 49982\nERR ${port}: timed out\n`);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(9900);
    } finally {
      for (const f of fill) f.destroy();
      py.kill();
    }
  }, 30_000);

  it("answers ERR bad request for anything but TCP <1..65535>", async () => {
    const bad = ["TCP 0\n", "TCP 65536\n", "TCP 99999999\n", "UDP 80\n", "tcp 80\n", "TCP\n", "TCP 8o\n", "TCP  80\n", "\n", `TCP ${"1".repeat(40)}`];
    for (const line of bad) {
      const r = await rawExchange(host, `CONNECT 49982\n${line}`);
      expect(r.data, JSON.stringify(line)).toBe("OK 49982\nERR bad request\n");
    }
    // The request line may arrive in pieces.
    const port = await echoServer();
    const s = net.createConnection(host);
    const all = readAll(s);
    s.write("CONNECT 49982\nTC");
    await new Promise((r) => setTimeout(r, 50));
    s.write(`P ${port}`);
    await new Promise((r) => setTimeout(r, 50));
    s.end("\nx");
    expect(await all).toBe("OK 49982\nOK\nx");
  });

  it("serves envd on 49983 alongside, and many forwarded connections at once, closing them all after", async () => {
    const port = await echoServer();
    const open = await dialForward(host, port);
    const agent = new HybridVsockAgent(host, ENVD_PORT);
    try {
      expect((await request(agent, "GET", "/health")).status).toBe(204);
    } finally {
      agent.destroy();
    }
    const fdsBefore = fdCount(init.pid);
    const replies = await Promise.all(
      Array.from({ length: 100 }, async (_, i) => {
        const s = await dialForward(host, port);
        const all = readAll(s);
        s.end(`message ${i}`);
        return all;
      }),
    );
    expect(replies).toEqual(Array.from({ length: 100 }, (_, i) => `message ${i}`));
    const still = readAll(open);
    open.end("still open");
    expect(await still).toBe("still open");
    await waitFor(() => fdCount(init.pid) <= fdsBefore - 2, "the init to close the forwarded connections", { timeoutMs: 10_000 });
  });
});

