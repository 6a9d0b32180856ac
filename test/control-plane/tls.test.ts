// `serve --tls-cert/--tls-key`: the API, the E2B REST and Connect routes, the
// envd proxy and `https://<port>-<id>.<domain>` hosts over TLS on one port,
// with a test CA made by openssl. The real `e2b` SDK runs in a child process
// that trusts the CA through NODE_EXTRA_CA_CERTS and finds the server only
// through E2B_DOMAIN (wildcard DNS for *.sandbox.test: wildcard-dns.cjs); this
// process trusts it through an https agent's `ca`. Nothing turns verification off.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import http2 from "node:http2";
import https from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { runCli, serve, type Served } from "../helpers/cli.js";
import { freePort } from "../helpers/oci-registry.js";
import { startSdkChild, type ChildAnswer, type SdkChild } from "../helpers/sdk-child.js";
import { waitFor } from "../helpers/sdk.js";
import { makeTestCa, type TestCa } from "../helpers/test-ca.js";

const DOMAIN = "sandbox.test";
const NAMES = [DOMAIN, `*.${DOMAIN}`, "IP:127.0.0.1"];
const apiKey = `e2b_${"7c".repeat(20)}`;

// A server the user runs in the sandbox: /hello says which Host it was asked for.
const USER_SERVER = `require("node:http").createServer((q, s) => s.end("hello via " + q.headers.host + " " + q.url)).listen(Number(process.argv[1]), "127.0.0.1")`;

let ca: TestCa;
let dataDir: string;
let certFile: string;
let keyFile: string;
let port: number;
let served: Served;
let sdk: SdkChild;
let sandboxId: string;
let agent: https.Agent;

/** GET over https from this process (trusting the test CA); the body is small. */
function get(path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    https
      .get(`https://127.0.0.1:${port}${path}`, { agent, servername: `api.${DOMAIN}` }, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (d: string) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode!, body }));
      })
      .on("error", reject);
  });
}

/** The serial number of the certificate a new TLS connection is given for `servername`. */
function servedSerial(servername: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: "127.0.0.1", port, servername, ca: ca.cert, ALPNProtocols: ["h2"] }, () => {
      const serial = parseInt(s.getPeerCertificate().serialNumber, 16);
      s.end();
      resolve(serial);
    });
    s.on("error", reject);
  });
}

async function connections(): Promise<Record<string, number>> {
  const { body } = await get("/metrics");
  const out: Record<string, number> = {};
  for (const m of body.matchAll(/^locale2b_connections_total\{protocol="([^"]+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
  return out;
}

function ok(a: ChildAnswer): ChildAnswer {
  if (a.error) throw new Error(`${a.error}\nSDK child stderr:\n${sdk.stderr()}\nserver stderr:\n${served.stderr()}`);
  return a;
}

beforeAll(async () => {
  ca = makeTestCa();
  dataDir = mkdtempSync(join(tmpdir(), "locale2b-tls-"));
  // The key lives in the data dir, as an operator might keep it: sandboxes must not reach it.
  mkdirSync(join(dataDir, "tls"), { mode: 0o700 });
  certFile = join(dataDir, "tls", "server.crt");
  keyFile = join(dataDir, "tls", "server.key");
  ca.issue(NAMES, 1001, certFile, keyFile);
  agent = new https.Agent({ ca: ca.cert, keepAlive: false });
  port = await freePort();
  served = await serve(dataDir, ["--port", String(port), "--domain", `${DOMAIN}:${port}`, "--tls-cert", certFile, "--tls-key", keyFile], {
    LOCALE2B_API_KEY: apiKey,
  });
  sdk = startSdkChild({ NODE_EXTRA_CA_CERTS: ca.certFile, E2B_DOMAIN: `${DOMAIN}:${port}`, E2B_API_KEY: apiKey }, { wildcardDomain: DOMAIN });
  sandboxId = String(ok(await sdk.call("create")).sandboxId);
});

afterAll(async () => {
  await sdk?.call("kill").catch(() => undefined);
  await sdk?.close();
  await served?.stop();
  agent?.destroy();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  ca?.remove();
});

describe("serve --tls-cert/--tls-key", () => {
  it("prints https:// URLs and serves the API over TLS; the SDK created its sandbox with E2B_DOMAIN alone", async () => {
    expect(served.url).toBe(`https://127.0.0.1:${port}`);
    expect(served.banner).toContain(`E2B_DOMAIN=${DOMAIN}:${port}`);
    expect(await get("/health")).toEqual({ status: 200, body: "ok\n" });
    expect(sandboxId).toMatch(/^[a-z0-9]+$/);
  });

  it("getHost(port) is fetched over https from outside, by HTTP/1.1 (the SDK's process, fetch) and HTTP/2", async () => {
    const userPort = await freePort();
    ok(await sdk.call("run", { cmd: `node -e '${USER_SERVER}' ${userPort}`, background: true }));
    const host = `${userPort}-${sandboxId}.${DOMAIN}:${port}`;
    let last: ChildAnswer | undefined;
    await waitFor(
      async () => (last = await sdk.call("fetch", { port: userPort, path: "/hello?h1" })).status === 200,
      () => `the user's server through https://${host} (last: ${JSON.stringify(last)})`,
    );
    expect(last!.body).toBe(`hello via ${host} /hello?h1`);

    // An HTTP/2 client (a browser, curl on https://) gets the same server.
    const session = http2.connect(`https://127.0.0.1:${port}`, { ca: ca.cert, servername: `${userPort}-${sandboxId}.${DOMAIN}` });
    try {
      const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = session.request({ ":path": "/hello?h2", ":authority": host });
        let body = "";
        let status = 0;
        req.on("response", (h) => (status = Number(h[":status"])));
        req.setEncoding("utf8").on("data", (d: string) => (body += d));
        req.on("end", () => resolve({ status, body }));
        req.on("error", reject);
      });
      expect(status).toBe(200);
      expect(body).toBe(`hello via ${host} /hello?h2`);
    } finally {
      session.close();
    }
  });

  it("a Connect stream (commands.run with streaming output) runs over HTTP/2 and goes on across a certificate swap; new connections get the new certificate", async () => {
    expect(await servedSerial(`api.${DOMAIN}`)).toBe(1001);
    const before = await connections();
    const ticks: string[] = [];
    const stream = sdk.call(
      "stream",
      { cmd: "rm -f /tmp/stop; i=0; while [ ! -e /tmp/stop ]; do echo tick $i; i=$((i+1)); sleep 0.1; done; echo end" },
      (e) => ticks.push(...String(e.data).split("\n").filter(Boolean)),
    );
    await waitFor(() => ticks.length >= 3, () => `3 lines of output (got ${ticks.length}; child stderr: ${sdk.stderr()})`);

    // Renewed in place, as certbot does: a new key and certificate renamed over the old files.
    ca.issue(NAMES, 2002, certFile, keyFile);
    let serial = 0;
    await waitFor(async () => (serial = await servedSerial(`api.${DOMAIN}`)) === 2002, () => `the new certificate on new connections (serial ${serial})`);
    expect(await servedSerial(`8080-${sandboxId}.${DOMAIN}`)).toBe(2002);
    const atSwap = ticks.length;
    await waitFor(() => ticks.length >= atSwap + 3, "output after the swap on the stream opened before it");

    ok(await sdk.call("run", { cmd: "touch /tmp/stop" }));
    const end = ok(await stream);
    expect(end.exitCode).toBe(0);
    expect(ticks.at(-1)).toBe("end");
    // Every line, in order, none lost across the swap.
    const numbers = ticks.slice(0, -1).map((t) => Number(t.replace("tick ", "")));
    expect(numbers).toEqual(numbers.map((_, i) => i));

    // The SDK (undici, ALPN) spoke HTTP/2: the stream's connection was counted as h2.
    const after = await connections();
    expect(after.h2!).toBeGreaterThan(before.h2!);
    // And the SDK keeps working on new connections, with the new certificate.
    expect(ok(await sdk.call("run", { cmd: "echo after" })).stdout).toBe("after\n");
  });

  it("a plain-HTTP request to the TLS port gets a clear error, not a hang (HTTP/1.1: 400; h2c: GOAWAY with the reason)", async () => {
    const h1 = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      http
        .get(`http://127.0.0.1:${port}/health`, (res) => {
          let body = "";
          res.setEncoding("utf8").on("data", (d: string) => (body += d));
          res.on("end", () => resolve({ status: res.statusCode!, body }));
        })
        .on("error", reject);
    });
    expect(h1.status).toBe(400);
    expect(h1.body).toBe(`This port serves HTTPS only: use https://127.0.0.1:${port}/health\n`);

    const reason = await new Promise<string>((resolve) => {
      const session = http2.connect(`http://127.0.0.1:${port}`);
      session.on("goaway", (_code, _last, data?: Buffer) => resolve(data?.toString() ?? "(no data)"));
      session.on("error", () => undefined);
      session.request({ ":path": "/health" }).on("error", () => undefined);
    });
    expect(reason).toBe("this port serves HTTP/2 over TLS only: connect with https://");
  });
});

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;

describe.skipIf(skip !== undefined)(`the TLS key from inside a sandbox${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it.each(["user", "root"] as const)("as %s: the key file under the data dir cannot be read, by commands or the files API", async (user) => {
    for (const cmd of [`cat ${keyFile}`, `cat /proc/1/root${keyFile}`, `ls -la ${join(dataDir, "tls")}`]) {
      // A failing command is the expected answer here (CommandExitError), not a test error.
      const r = await sdk.call("run", { cmd, user });
      expect(r.exitCode, `${cmd}: ${JSON.stringify(r)}`).toBeGreaterThan(0);
      expect(`${r.stdout}${r.stderr}`, cmd).not.toContain("PRIVATE KEY");
    }
    const read = await sdk.call("readFile", { path: keyFile, user });
    expect(read.content).toBeUndefined();
    expect(String(read.error)).toMatch(/does not exist|not found|permission denied|no such file/i);
  });
});

describe("bad TLS files stop serve with a clear error", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "locale2b-tls-bad-"));
    ca.issue(["other.test"], 3003, join(dir, "other.crt"), join(dir, "other.key"));
    writeFileSync(join(dir, "garbage.crt"), "not a certificate\n");
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const start = (cert: string, key: string) =>
    runCli(["serve", "--port", "0", "--data-dir", join(dir, "data"), "--tls-cert", cert, "--tls-key", key], { LOCALE2B_API_KEY: apiKey });

  it("a missing certificate file", async () => {
    const r = await start(join(dir, "missing.crt"), keyFile);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`cannot serve TLS: cannot read the TLS certificate ${join(dir, "missing.crt")}: no such file`);
  });

  it("a file that is not a certificate", async () => {
    const r = await start(join(dir, "garbage.crt"), keyFile);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`the TLS certificate ${join(dir, "garbage.crt")} is not a PEM certificate`);
  });

  it("a key that is not the certificate's", async () => {
    const r = await start(certFile, join(dir, "other.key"));
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`the TLS key ${join(dir, "other.key")} is not the key of the certificate ${certFile}`);
  });

  it("a certificate without its key", async () => {
    const r = await runCli(["serve", "--port", "0", "--data-dir", join(dir, "data"), "--tls-cert", certFile]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--tls-cert and --tls-key go in pairs: got 1 certificate(s) and 0 key(s)");
  });
});
