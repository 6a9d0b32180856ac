// The interception parts of the egress proxy on this host, without a
// sandbox: which rules match a name, headers after them, the egress CA
// (files, modes, leaf certificates a client verifies), and the Interceptor
// between a real client and real upstream servers (a header set, a bad
// upstream certificate refused, a WebSocket upgrade carried through).
import { once } from "node:events";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import https from "node:https";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadOrCreateCa, type EgressCa } from "../../control-plane/runtimes/net/egress-proxy/ca.js";
import { readFirstBytes } from "../../control-plane/runtimes/net/egress-proxy/first-bytes.js";
import { Interceptor } from "../../control-plane/runtimes/net/egress-proxy/intercept.js";
import { ControlPlaneError } from "../../control-plane/domain/errors.js";
import { rulesFor, setSecretResolver, TransformError, transformHeaders } from "../../control-plane/runtimes/net/egress-proxy/transforms.js";
import type { NetworkRules } from "../../control-plane/domain/network.js";
import { makeTestCa, type TestCa } from "../helpers/test-ca.js";

const dir = mkdtempSync(join(tmpdir(), "locale2b-intercept-"));
let ca: EgressCa;
let testCa: TestCa;
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  testCa?.remove();
  setSecretResolver(undefined);
});

describe("rules and headers", () => {
  const rules: NetworkRules = {
    "api.example.com": [{ transform: { headers: { A: "exact" } } }],
    "*.example.com": [{ transform: { headers: { A: "wild" } } }],
    "*.deep.example.com": [{ transform: { headers: { A: "deeper" } } }],
  };
  it("an exact key wins, then the longest wildcard; a wildcard is not its apex", () => {
    expect(rulesFor(rules, "API.example.com.")?.[0]?.transform?.headers?.A).toBe("exact");
    expect(rulesFor(rules, "x.example.com")?.[0]?.transform?.headers?.A).toBe("wild");
    expect(rulesFor(rules, "a.b.deep.example.com")?.[0]?.transform?.headers?.A).toBe("deeper");
    expect(rulesFor(rules, "example.com")).toBeUndefined();
    expect(rulesFor(rules, "badexample.com")).toBeUndefined();
    expect(rulesFor(rules, undefined)).toBeUndefined();
  });

  it("sets headers in rule order, replacing any of the same name; resolves only the rules' placeholders", async () => {
    setSecretResolver(async (v, id) => v.replace("${e2b.secrets.k}", `value-for-${id}`));
    const out = await transformHeaders(["Host", "h", "authorization", "mine", "X-Keep", "${e2b.secrets.k}"], [
      { transform: { headers: { Authorization: "first" } } },
      {},
      { transform: { headers: { AUTHORIZATION: "Bearer ${e2b.secrets.k}" } } },
    ], "sbx1");
    expect(out).toEqual(["Host", "h", "X-Keep", "${e2b.secrets.k}", "AUTHORIZATION", "Bearer value-for-sbx1"]);
    setSecretResolver(async () => {
      throw new Error("secret 'k' does not exist");
    });
    await expect(transformHeaders([], [{ transform: { headers: { A: "${e2b.secrets.k}" } } }], "s")).rejects.toThrow(TransformError);
    // The sandbox hears why its own rule failed (an unknown secret), never the store's own trouble (host paths).
    setSecretResolver(async () => {
      throw new ControlPlaneError("not_found", "a header refers to secret 'k', which does not exist");
    });
    await expect(transformHeaders([], [{ transform: { headers: { A: "${e2b.secrets.k}" } } }], "s")).rejects.toThrow(/secret 'k', which does not exist/);
    setSecretResolver(async () => {
      throw new ControlPlaneError("unavailable", "secrets are not available: /var/lib/locale2b/secrets.key may be read by others");
    });
    const hidden = await transformHeaders([], [{ transform: { headers: { A: "${e2b.secrets.k}" } } }], "s").catch((e: Error) => e);
    expect(hidden).toBeInstanceOf(TransformError);
    expect((hidden as Error).message).toMatch(/could not read its secrets/);
    expect((hidden as Error).message).not.toMatch(/secrets\.key|\/var\/lib/);
    setSecretResolver(undefined);
    await expect(transformHeaders([], [{ transform: { headers: { A: "${e2b.secrets.k}" } } }], "s")).rejects.toThrow(/resolves no secrets/);
    expect(await transformHeaders([], [{ transform: { headers: { A: "plain" } } }], "s")).toEqual(["A", "plain"]);
  });
});

describe("the egress CA", () => {
  it("keeps its key 0600 in a 0700 folder, loads the same CA again, and refuses a key that is not its certificate's", () => {
    ca = loadOrCreateCa(join(dir, "ca"));
    expect(statSync(join(dir, "ca")).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, "ca", "ca.key")).mode & 0o777).toBe(0o600);
    expect(ca.certPem).toMatch(/BEGIN CERTIFICATE/);
    expect(loadOrCreateCa(join(dir, "ca")).fingerprint).toBe(ca.fingerprint);
    const other = loadOrCreateCa(join(dir, "other"));
    expect(other.fingerprint).not.toBe(ca.fingerprint);
    writeFileSync(join(dir, "other", "ca.crt"), ca.certPem);
    expect(() => loadOrCreateCa(join(dir, "other"))).toThrow(/ca.key is not the key of ca.crt/);
  });

  it("signs leaf certificates a client verifies for their name only", async () => {
    const server = tls.createServer({ SNICallback: (n, cb) => cb(null, ca.contextFor(n)) }, (s) => s.end("hi"));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as net.AddressInfo).port;
    const connect = (servername: string, checkAs: string) =>
      new Promise<string>((resolve) => {
        const c = tls.connect({ port, host: "127.0.0.1", servername, ca: ca.certPem, checkServerIdentity: (_h, cert) => tls.checkServerIdentity(checkAs, cert) });
        c.on("secureConnect", () => (resolve("ok"), c.destroy()));
        c.on("error", (e) => resolve((e as NodeJS.ErrnoException).code ?? e.message));
      });
    expect(await connect("api.example.com", "api.example.com")).toBe("ok");
    expect(await connect("api.example.com", "other.example.com")).toBe("ERR_TLS_CERT_ALTNAME_INVALID");
    server.close();
  });
});

describe("the Interceptor", () => {
  let upstream: https.Server;
  let upstreamPort = 0;
  let front: net.Server;
  let frontPort = 0;
  let trusted = true;

  beforeAll(async () => {
    testCa = makeTestCa();
    testCa.issue(["api.example.com"], 1, join(dir, "up.crt"), join(dir, "up.key"));
    const { readFileSync } = await import("node:fs");
    upstream = https.createServer({ cert: readFileSync(join(dir, "up.crt")), key: readFileSync(join(dir, "up.key")) }, (req, res) => {
      res.end(`auth=${req.headers.authorization ?? "absent"} host=${req.headers.host}`);
    });
    upstream.on("upgrade", (_req, socket: net.Socket) => {
      socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
      socket.pipe(socket);
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r));
    upstreamPort = (upstream.address() as net.AddressInfo).port;
    const rules: NetworkRules = { "api.example.com": [{ transform: { headers: { Authorization: "Bearer set-by-rule" } } }] };
    const good = new Interceptor({ ca, upstream: tls.createSecureContext({ ca: testCa.cert }), rulesFor: (n) => rulesFor(rules, n) });
    const bad = new Interceptor({ ca, upstream: tls.createSecureContext({ ca: tls.rootCertificates as string[] }), rulesFor: (n) => rulesFor(rules, n) });
    front = net.createServer({ pauseOnConnect: true }, async (client) => {
      const { head, ...first } = await readFirstBytes(client, 2000);
      (trusted ? good : bad).take({ sandboxId: "s", client, head, first, destination: { address: "127.0.0.1", port: upstreamPort }, log: pino({ level: "silent" }) });
    });
    await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
    frontPort = (front.address() as net.AddressInfo).port;
  });
  afterAll(() => {
    front?.close();
    upstream?.close();
  });

  const get = () =>
    new Promise<{ status: number; body: string; issuer: string; curve: string }>((resolve, reject) => {
      const req = https.get({ host: "127.0.0.1", port: frontPort, servername: "api.example.com", headers: { host: "api.example.com", authorization: "mine" }, ca: ca.certPem, agent: false }, (res) => {
        let body = "";
        res.on("data", (c) => (body += c));
        res.on("end", () => resolve({ status: res.statusCode!, body, issuer: String((res.socket as tls.TLSSocket).getPeerCertificate().issuer?.CN ?? ""), curve: String((res.socket as tls.TLSSocket).getPeerCertificate().asn1Curve) }));
      });
      req.on("error", reject);
    });

  it("sets the rule's header over TLS it terminates with the egress CA, and forwards to the verified upstream", async () => {
    trusted = true;
    const r = await get();
    expect(r).toMatchObject({ status: 200, body: "auth=Bearer set-by-rule host=api.example.com" });
    expect(r.issuer).toMatch(/locale2b egress CA/);
    // The leaf's key is P-256 (an ECDSA handshake), signed by the RSA CA.
    expect(r.curve).toBe("prime256v1");
  });

  it("fails closed on an upstream certificate it cannot verify: 502, nothing sent", async () => {
    trusted = false;
    const r = await get();
    expect(r.status).toBe(502);
    expect(r.body).toMatch(/'api.example.com' \(127.0.0.1:\d+\) failed: (UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)/);
  });

  it("carries a WebSocket upgrade through, both ways", async () => {
    trusted = true;
    const socket = tls.connect({ host: "127.0.0.1", port: frontPort, servername: "api.example.com", ca: ca.certPem, ALPNProtocols: ["h2", "http/1.1"] });
    await once(socket, "secureConnect");
    expect(socket.alpnProtocol).toBe("http/1.1");
    socket.write("GET /ws HTTP/1.1\r\nHost: api.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    let got = "";
    socket.on("data", (d) => (got += d.toString()));
    while (!got.includes("\r\n\r\n")) await once(socket, "data");
    expect(got).toMatch(/^HTTP\/1.1 101/);
    got = "";
    socket.write("ping-bytes");
    while (!got.includes("ping-bytes")) await once(socket, "data");
    socket.destroy();
  });
});
