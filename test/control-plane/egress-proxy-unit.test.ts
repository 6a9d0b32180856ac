// The egress proxy's pieces on their own: the ClientHello SNI reader on real
// ClientHellos (Node's TLS client, captured from a socket) and on edge cases,
// the HTTP Host reader, the name matcher and the verdict's precedence.
import net from "node:net";
import tls from "node:tls";
import { describe, expect, it } from "vitest";
import { peekClientHello } from "../../control-plane/runtimes/net/egress-proxy/client-hello.js";
import { peekHttpHost } from "../../control-plane/runtimes/net/egress-proxy/http-host.js";
import { judge, nameAllowed } from "../../control-plane/runtimes/net/egress-proxy/verdict.js";

/** The first bytes a TLS client sends (its ClientHello), with `servername` (undefined: none, as for an IP literal). */
async function clientHello(servername?: string): Promise<Buffer> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const got = new Promise<Buffer>((resolve) => server.once("connection", (s) => s.once("data", (d: Buffer) => (resolve(d), s.destroy()))));
  const port = (server.address() as net.AddressInfo).port;
  const c = tls.connect({ host: "127.0.0.1", port, ...(servername !== undefined ? { servername } : {}), rejectUnauthorized: false });
  c.on("error", () => undefined);
  const hello = await got;
  c.destroy();
  server.close();
  return hello;
}

/** A ClientHello record by hand: the given extensions after an empty session id, one suite, null compression. */
function handHello(extensions: [number, Buffer][]): Buffer {
  const ext = Buffer.concat(extensions.map(([t, d]) => Buffer.concat([u16(t), u16(d.length), d])));
  const body = Buffer.concat([Buffer.from([3, 3]), Buffer.alloc(32), Buffer.from([0]), u16(2), Buffer.from([0x13, 0x01]), Buffer.from([1, 0]), u16(ext.length), ext]);
  const hs = Buffer.concat([Buffer.from([1, body.length >> 16, (body.length >> 8) & 255, body.length & 255]), body]);
  return Buffer.concat([Buffer.from([0x16, 3, 1]), u16(hs.length), hs]);
}
const u16 = (n: number) => Buffer.from([n >> 8, n & 255]);
const sni = (name: string) => {
  const n = Buffer.from(name);
  return Buffer.concat([u16(n.length + 3), Buffer.from([0]), u16(n.length), n]);
};

describe("ClientHello SNI", () => {
  it("reads the server name of a real ClientHello, whole or arriving in pieces", async () => {
    const hello = await clientHello("api.example.com");
    expect(peekClientHello(hello)).toEqual({ state: "done", name: "api.example.com", ech: false });
    for (const cut of [1, 3, 5, 6, 40, hello.length - 1]) expect(peekClientHello(hello.subarray(0, cut)), `first ${cut} bytes`).toEqual({ state: "more" });
  });

  it("a hello without SNI names nothing", async () => {
    // Node sends no SNI when none is given (as curl does for an IP literal).
    const hello = await clientHello();
    expect(peekClientHello(hello)).toEqual({ state: "done", ech: false });
    expect(peekClientHello(handHello([]))).toEqual({ state: "done", ech: false });
  });

  it("marks an encrypted ClientHello (its outer SNI is not the real name)", () => {
    expect(peekClientHello(handHello([[0, sni("public.example")], [0xfe0d, Buffer.alloc(8)]]))).toEqual({ state: "done", name: "public.example", ech: true });
  });

  it("reads a hello split across two TLS records", () => {
    const rec = handHello([[0, sni("split.example.com")]]);
    const hs = rec.subarray(5);
    const split = Buffer.concat([Buffer.from([0x16, 3, 1]), u16(10), hs.subarray(0, 10), Buffer.from([0x16, 3, 1]), u16(hs.length - 10), hs.subarray(10)]);
    expect(peekClientHello(split)).toEqual({ state: "done", name: "split.example.com", ech: false });
    expect(peekClientHello(split.subarray(0, 20))).toEqual({ state: "more" });
  });

  it("is not fooled by other bytes", () => {
    expect(peekClientHello(Buffer.from("GET / HTTP/1.1\r\n"))).toEqual({ state: "other" });
    expect(peekClientHello(Buffer.from([0x16, 0x04]))).toEqual({ state: "other" });
    // A handshake record that is not a ClientHello (a ServerHello).
    const rec = handHello([]);
    rec[5] = 2;
    expect(peekClientHello(rec)).toEqual({ state: "other" });
    // Truncated extensions: a hello that names nothing.
    const bad = handHello([[0, sni("x.example")]]);
    bad.writeUInt16BE(0xffff, 5 + 4 + 2 + 32 + 1 + 2 + 2 + 2);
    expect(peekClientHello(bad)).toEqual({ state: "done", ech: false });
  });
});

describe("HTTP Host", () => {
  it("reads the Host of the first request, without its port", () => {
    expect(peekHttpHost(Buffer.from("GET /x HTTP/1.1\r\nHost: api.example.com:8080\r\nAccept: */*\r\n\r\n"))).toEqual({ state: "done", name: "api.example.com" });
    expect(peekHttpHost(Buffer.from("POST / HTTP/1.0\r\nhost: a.example\r\n\r\nbody"))).toEqual({ state: "done", name: "a.example" });
    expect(peekHttpHost(Buffer.from("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"))).toEqual({ state: "done", name: "::1" });
  });

  it("waits for the whole head, and names nothing without exactly one Host", () => {
    expect(peekHttpHost(Buffer.from("GE"))).toEqual({ state: "more" });
    expect(peekHttpHost(Buffer.from("GET /index.html HT"))).toEqual({ state: "more" });
    expect(peekHttpHost(Buffer.from("GET / HTTP/1.1\r\nHost: a.example\r\n"))).toEqual({ state: "more" });
    expect(peekHttpHost(Buffer.from("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"))).toEqual({ state: "done" });
    expect(peekHttpHost(Buffer.from("GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"))).toEqual({ state: "done" });
  });

  it("tells other protocols apart", () => {
    expect(peekHttpHost(Buffer.from("SSH-2.0-OpenSSH_9.2\r\n"))).toEqual({ state: "other" });
    expect(peekHttpHost(Buffer.from("hello\r\n\r\n"))).toEqual({ state: "other" });
    expect(peekHttpHost(Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))).toEqual({ state: "other" });
  });
});

describe("names and verdicts", () => {
  it("matches exact names and wildcards (subdomains at any depth, not the apex), case and trailing dot aside", () => {
    const names = ["api.example.com", "*.github.com"];
    expect(nameAllowed(names, "api.example.com")).toBe(true);
    expect(nameAllowed(names, "API.Example.com.")).toBe(true);
    expect(nameAllowed(names, "www.example.com")).toBe(false);
    expect(nameAllowed(names, "raw.github.com")).toBe(true);
    expect(nameAllowed(names, "a.b.github.com")).toBe(true);
    expect(nameAllowed(names, "github.com")).toBe(false);
    expect(nameAllowed(names, "evilgithub.com")).toBe(false);
    expect(nameAllowed(names, "1.2.3.4")).toBe(false);
  });

  it("allowOut wins over denyOut; a name is believed only where it resolves to", async () => {
    const policy = { allow: ["10.0.0.0/24"], deny: ["0.0.0.0/0"], names: ["api.example.com"] };
    const asked: string[] = [];
    const resolves = async (name: string, address: string) => (asked.push(name), name === "api.example.com" && address === "192.0.2.1");
    expect(await judge(policy, "10.0.0.5", "anything.example", resolves)).toMatchObject({ allow: true, by: "address" });
    expect(await judge(policy, "192.0.2.1", "api.example.com", resolves)).toMatchObject({ allow: true, by: "name" });
    expect(await judge(policy, "192.0.2.2", "api.example.com", resolves)).toMatchObject({ allow: false, reason: expect.stringMatching(/does not resolve to 192\.0\.2\.2/) });
    expect(await judge(policy, "192.0.2.1", undefined, resolves)).toMatchObject({ allow: false, reason: expect.stringMatching(/names no host/) });
    expect(await judge(policy, "192.0.2.1", "other.example", resolves)).toMatchObject({ allow: false });
    // Only names that would change the verdict are looked up.
    expect(asked).toEqual(["api.example.com", "api.example.com"]);
    // A deny list that does not cover the address: open, whatever the name.
    expect(await judge({ allow: [], deny: ["198.51.100.0/24"], names: ["a.example"] }, "192.0.2.9", "b.example", resolves)).toMatchObject({ allow: true });
  });
});
