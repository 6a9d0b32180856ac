// envd's one-socket server (envd/server/h1-h2c-server.ts) keeps Node's
// back-pressure on HTTP/1.1 request bodies: a handler that has not read its
// body yet gets the first 64 KiB or so, not the whole body as fast as the
// client sends it (a paused socket that went on reading filled envd's
// memory with a large upload while its handler was still starting). Over TCP
// and over the hybrid-vsock Unix socket sandboxes use.
import http from "node:http";
import net from "node:net";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { H1H2cServer } from "../../envd/server/h1-h2c-server.js";
import { acceptHybridVsock } from "../../envd/server/vsock-handshake.js";
import { ENVD_PORT } from "../../envd/version.js";

const MiB = 1024 * 1024;
const BODY = 64 * MiB;
const dir = mkdtempSync(join(tmpdir(), "locale2b-h1h2c-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Held {
  req: http.IncomingMessage;
  socket: net.Socket & { _handle?: { reading?: boolean } };
}

async function serve(kind: "tcp" | "unix+vsock") {
  let held: ((h: Held) => void) | undefined;
  const first = new Promise<Held>((resolve) => (held = resolve));
  const server = new H1H2cServer((req, res) => {
    const r = req as http.IncomingMessage;
    if (r.url === "/hold") {
      held!({ req: r, socket: r.socket as Held["socket"] });
      let n = 0;
      // Read only once the test says so.
      r.once("resume-test", () => {
        r.on("data", (c: Buffer) => (n += c.length));
        r.on("end", () => (res as http.ServerResponse).end(String(n)));
      });
    }
  });
  const listener = net.createServer(kind === "unix+vsock" ? (s) => acceptHybridVsock(s, (c) => server.accept(c)) : (s) => server.accept(s));
  const path = join(dir, `${kind}.sock`);
  await new Promise<void>((resolve) => (kind === "tcp" ? listener.listen(0, "127.0.0.1", resolve) : listener.listen(path, resolve)));
  const connect = async (): Promise<net.Socket> => {
    if (kind === "tcp") return net.connect((listener.address() as net.AddressInfo).port, "127.0.0.1");
    const s = net.connect(path);
    s.write(`CONNECT ${ENVD_PORT}\n`);
    await new Promise<void>((resolve) => s.once("data", () => resolve()));
    return s;
  };
  return {
    first,
    connect,
    close: () => {
      server.close();
      listener.close();
    },
  };
}

describe("H1H2cServer", () => {
  for (const kind of ["tcp", "unix+vsock"] as const) {
    it(`stops reading a request body nobody reads yet (${kind})`, async () => {
      const srv = await serve(kind);
      try {
        const client = await srv.connect();
        let answer = "";
        client.on("data", (c: Buffer) => (answer += c.toString()));
        // All of it at once: what the server does not read waits in the client.
        client.write(`POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: ${BODY}\r\n\r\n`);
        client.write(Buffer.alloc(BODY, 1));
        const { req, socket } = await srv.first;
        // The server stops its reads with most of the body still unsent...
        await expect.poll(() => socket._handle?.reading, { timeout: 30_000 }).toBe(false);
        expect(socket.bytesRead).toBeLessThan(8 * MiB);
        expect(req.readableLength).toBeLessThan(MiB);
        expect(client.writableLength).toBeGreaterThan(0);
        // ...and reads the rest once the handler does: the stop was back-pressure, not an end.
        req.emit("resume-test");
        await expect.poll(() => answer, { timeout: 30_000 }).toMatch(new RegExp(`\\r\\n\\r\\n${BODY}$`));
        client.destroy();
      } finally {
        srv.close();
      }
    });
  }
});
