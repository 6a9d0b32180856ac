import { request } from "node:http";
import { connect, type ClientHttp2Session } from "node:http2";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { makeTestCa, type TestCa } from "../helpers/test-ca.js";

// The dashboard's doors, over plain HTTP against a real server (no sandbox needed): nothing but the page's
// static files and the sign-in answer without a session cookie; the cookie's attributes; a cookie is worthless
// after sign-out or once its key is revoked; changes need the CSRF token and a same-origin request.
// The browser's side of it (a real Chromium) is test/control-plane/dashboard-browser.test.ts.

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

function send(base: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, base), { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** Every API path the page uses, and a few it does not: all refuse without a session. */
const API_CALLS: [string, string][] = [
  ["GET", "/dashboard/api/workspace/sandboxes"],
  ["GET", "/dashboard/api/workspace/events/stream?event_type=sandbox.*"],
  ["GET", "/dashboard/api/workspace/sandboxes/abc/metrics"],
  ["GET", "/dashboard/api/workspace/audit"],
  ["POST", "/dashboard/api/workspace/sandboxes/abc/exec/start"],
  ["POST", "/dashboard/api/workspace/sandboxes/abc/exec/s1/input"],
  ["POST", "/dashboard/api/workspace/sandboxes/abc/exec/s1/resize"],
  ["GET", "/dashboard/api/e2b/v2/sandboxes"],
  ["GET", "/dashboard/api/e2b/sandboxes/metrics?sandbox_ids=abc"],
  ["DELETE", "/dashboard/api/e2b/sandboxes/abc"],
  ["POST", "/dashboard/api/e2b/sandboxes/abc/pause"],
  ["POST", "/dashboard/api/e2b/sandboxes/abc/timeout"],
  // The pages for processes, templates, snapshots, keys, the audit log and capacity.
  ["GET", "/dashboard/api/workspace/sandboxes/abc/processes"],
  ["POST", "/dashboard/api/workspace/sandboxes/abc/processes/12/signal"],
  ["GET", "/dashboard/api/workspace/capacity"],
  ["GET", "/dashboard/api/workspace/audit?action=pause&format=csv"],
  ["GET", "/dashboard/api/e2b/templates"],
  ["GET", "/dashboard/api/e2b/templates/abc"],
  ["GET", "/dashboard/api/e2b/templates/abc/builds/b1/status?logsOffset=0"],
  ["DELETE", "/dashboard/api/e2b/templates/abc"],
  ["GET", "/dashboard/api/e2b/snapshots"],
  ["POST", "/dashboard/api/e2b/sandboxes"],
  ["GET", "/dashboard/api/keys"],
  ["POST", "/dashboard/api/keys"],
  ["DELETE", "/dashboard/api/keys/key_0123456789ab"],
  ["GET", "/dashboard/api/nothing/here"],
  ["GET", "/dashboard/api"],
];

describe("dashboard sessions and CSRF", () => {
  let cp: TestControlPlane;

  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 0 });
  });
  afterAll(async () => {
    await cp?.close();
  });

  const signIn = async (key = cp.apiKey, headers: Record<string, string> = {}) =>
    send(cp.url, "POST", "/dashboard/session", { "content-type": "application/json", ...headers }, JSON.stringify({ api_key: key }));
  const cookieOf = (a: Answer) => String(a.headers["set-cookie"]).split(";")[0]!;

  it("serves the page and its assets to anyone, with a strict CSP, and redirects its inner pages to sign-in", async () => {
    const page = await send(cp.url, "GET", "/dashboard/");
    expect(page.status).toBe(200);
    expect(page.body).toContain('<div id="app">');
    expect(page.headers["content-security-policy"]).toContain("script-src 'self'");
    expect(page.headers["x-frame-options"]).toBe("DENY");
    expect(page.headers["access-control-allow-origin"]).toBeUndefined();
    const js = /src="(\/dashboard\/assets\/app\.js[^"]*)"/.exec(page.body)![1]!;
    const asset = await send(cp.url, "GET", js, { "accept-encoding": "gzip" });
    expect(asset.status).toBe(200);
    expect(asset.headers["content-encoding"]).toBe("gzip");
    const inner = await send(cp.url, "GET", "/dashboard/sandboxes/abc");
    expect(inner.status).toBe(303);
    expect(inner.headers.location).toBe("/dashboard/?next=%2Fdashboard%2Fsandboxes%2Fabc");
    expect((await send(cp.url, "GET", "/dashboard/assets/..%2f..%2fpackage.json")).status).toBe(404);
  });

  it("refuses every API call and the session without a cookie, or with a made-up one", async () => {
    for (const cookie of [undefined, "l2b_dashboard=forged", `l2b_dashboard=${"A".repeat(43)}`]) {
      for (const [method, path] of API_CALLS) {
        const a = await send(cp.url, method, path, cookie ? { cookie } : {});
        expect(a.status, `${method} ${path} with ${cookie ?? "no cookie"}`).toBe(401);
        expect(JSON.parse(a.body).error).toBe("unauthenticated");
      }
      expect((await send(cp.url, "GET", "/dashboard/session", cookie ? { cookie } : {})).status).toBe(401);
    }
    // An API key is not a dashboard credential: the gateway takes only the cookie.
    expect((await send(cp.url, "GET", "/dashboard/api/workspace/sandboxes", { "x-api-key": cp.apiKey })).status).toBe(401);
    expect((await send(cp.url, "GET", "/dashboard/api/workspace/sandboxes", { authorization: `Bearer ${cp.apiKey}` })).status).toBe(401);
  });

  it("exchanges a valid key for an HttpOnly SameSite=Strict cookie, refuses a bad one, and never echoes the key", async () => {
    expect((await signIn("e2b_" + "0".repeat(40))).status).toBe(401);
    expect((await signIn("")).status).toBe(401);
    expect((await send(cp.url, "POST", "/dashboard/session", { "content-type": "text/plain" }, cp.apiKey)).status).toBe(415);
    const ok = await signIn();
    expect(ok.status).toBe(200);
    expect(ok.body).not.toContain(cp.apiKey);
    const setCookie = String(ok.headers["set-cookie"]);
    expect(setCookie).toMatch(/^l2b_dashboard=[A-Za-z0-9_-]{43}; Path=\/dashboard; Max-Age=\d+; HttpOnly; SameSite=Strict$/);
    expect(setCookie).not.toContain(cp.apiKey);
    // Behind a TLS-terminating proxy the cookie is Secure.
    expect(String((await signIn(cp.apiKey, { "x-forwarded-proto": "https" })).headers["set-cookie"])).toMatch(/; Secure$/);
    const body = JSON.parse(ok.body) as { key_id: string; csrf_token: string };
    expect(body.key_id).toMatch(/^key_/);
    const cookie = cookieOf(ok);
    const list = await send(cp.url, "GET", "/dashboard/api/workspace/sandboxes", { cookie });
    expect(list.status).toBe(200);
    expect(JSON.parse(list.body)).toEqual({ sandboxes: [] });
    // What the gateway forwards is data: no script of this origin may run from it, no sniffing.
    expect(list.headers["content-security-policy"]).toBe("default-src 'none'; frame-ancestors 'none'; sandbox");
    expect(list.headers["x-content-type-options"]).toBe("nosniff");
    expect((await send(cp.url, "GET", "/dashboard/api/e2b/v2/sandboxes", { cookie })).status).toBe(200);
    // The gateway's calls are audited as the key, like any other client's.
    const audit = await send(cp.url, "GET", "/dashboard/api/workspace/audit?limit=1000", { cookie });
    const entries = audit.body.trim().split("\n").map((l) => JSON.parse(l) as { actor: string; api: string; action: string; status: number });
    expect(entries).toContainEqual(expect.objectContaining({ actor: body.key_id, api: "dashboard", action: "POST /dashboard/session", status: 200 }));
    expect(entries).toContainEqual(expect.objectContaining({ actor: body.key_id, api: "workspace", action: "GET /sandboxes", status: 200 }));
    expect(entries).toContainEqual(expect.objectContaining({ actor: "anonymous", api: "dashboard", action: "POST /dashboard/session", status: 401 }));
  });

  it("needs the CSRF token and a same-origin request for changes, and refuses cross-site sign-ins", async () => {
    const ok = await signIn();
    const cookie = cookieOf(ok);
    const { csrf_token } = JSON.parse(ok.body) as { csrf_token: string };
    const json = { "content-type": "application/json" };
    const path = "/dashboard/api/e2b/sandboxes/nosuchsandbox/timeout";
    const body = JSON.stringify({ timeout: 60 });
    // No token, a wrong token: refused before the API sees it.
    expect((await send(cp.url, "POST", path, { cookie, ...json }, body)).status).toBe(403);
    expect((await send(cp.url, "POST", path, { cookie, ...json, "x-csrf-token": "wrong" }, body)).status).toBe(403);
    // With the token but from another site: refused.
    const host = new URL(cp.url).host;
    const sites: Record<string, string>[] = [{ origin: "https://evil.example" }, { origin: `http://localhost:1` }, { "sec-fetch-site": "cross-site" }, { "sec-fetch-site": "same-site" }];
    for (const from of sites) {
      const a = await send(cp.url, "POST", path, { cookie, ...json, "x-csrf-token": csrf_token, ...from }, body);
      expect(a.status, JSON.stringify(from)).toBe(403);
      expect(JSON.parse(a.body).error).toBe("cross_site");
    }
    // The new pages' changes too: without the token, and from another site with it.
    for (const [method, p] of [["POST", "/dashboard/api/keys"], ["DELETE", "/dashboard/api/keys/key_0123456789ab"], ["POST", "/dashboard/api/workspace/sandboxes/abc/processes/12/signal"], ["DELETE", "/dashboard/api/e2b/templates/abc"], ["POST", "/dashboard/api/e2b/sandboxes"]] as const) {
      const b = method === "POST" ? "{}" : undefined;
      expect((await send(cp.url, method, p, { cookie, ...json }, b)).status, `${method} ${p} without token`).toBe(403);
      const a = await send(cp.url, method, p, { cookie, ...json, "x-csrf-token": csrf_token, origin: "https://evil.example" }, b);
      expect(a.status, `${method} ${p} cross-site`).toBe(403);
    }
    for (const p of ["/dashboard/api/keys", "/dashboard/api/workspace/audit?format=csv", "/dashboard/api/workspace/capacity"]) {
      expect((await send(cp.url, "GET", p, { cookie, "sec-fetch-site": "cross-site" })).status, p).toBe(403);
    }
    // A cross-site GET (a link, an <img>) with the cookie is refused too.
    expect((await send(cp.url, "GET", "/dashboard/api/workspace/sandboxes", { cookie, "sec-fetch-site": "cross-site" })).status).toBe(403);
    // Token, same origin: it reaches the API (which knows no such sandbox).
    const through = await send(cp.url, "POST", path, { cookie, ...json, "x-csrf-token": csrf_token, origin: `http://${host}`, "sec-fetch-site": "same-origin" }, body);
    expect(through.status).toBe(404);
    // Sign-in from another site is refused even with a valid key (login CSRF).
    expect((await signIn(cp.apiKey, { origin: "https://evil.example" })).status).toBe(403);
    expect((await signIn(cp.apiKey, { "sec-fetch-site": "cross-site" })).status).toBe(403);
  });

  it("refuses a session cookie after sign-out, and a session whose key was revoked", async () => {
    const ok = await signIn();
    const cookie = cookieOf(ok);
    const { csrf_token } = JSON.parse(ok.body) as { csrf_token: string };
    expect((await send(cp.url, "DELETE", "/dashboard/session", { cookie })).status).toBe(403); // no CSRF token
    const out = await send(cp.url, "DELETE", "/dashboard/session", { cookie, "x-csrf-token": csrf_token });
    expect(out.status).toBe(200);
    expect(String(out.headers["set-cookie"])).toContain("Max-Age=0");
    expect((await send(cp.url, "GET", "/dashboard/session", { cookie })).status).toBe(401);
    for (const [method, path] of API_CALLS) expect((await send(cp.url, method, path, { cookie, "x-csrf-token": csrf_token })).status, `${method} ${path}`).toBe(401);
    expect((await send(cp.url, "GET", "/dashboard/sandboxes/abc", { cookie })).status).toBe(303);

    // A second key, signed in, then revoked: its session stops working at once.
    const extra = await cp.store.createApiKey("dashboard-test");
    const s2 = await signIn(extra.key);
    const cookie2 = cookieOf(s2);
    expect((await send(cp.url, "GET", "/dashboard/api/workspace/sandboxes", { cookie: cookie2 })).status).toBe(200);
    await cp.store.revokeApiKey(extra.info.id);
    expect((await send(cp.url, "GET", "/dashboard/api/workspace/sandboxes", { cookie: cookie2 })).status).toBe(401);
    expect((await send(cp.url, "GET", "/dashboard/session", { cookie: cookie2 })).status).toBe(401);
  });
});

// Over TLS a browser speaks HTTP/2 (ALPN h2): the cookie is Secure, and the origin check reads :authority.
describe("dashboard over TLS and HTTP/2", () => {
  let cp: TestControlPlane;
  let ca: TestCa;
  let h2: ClientHttp2Session;

  beforeAll(async () => {
    ca = makeTestCa();
    const cert = join(ca.dir, "server.crt");
    const key = join(ca.dir, "server.key");
    ca.issue(["localhost", "IP:127.0.0.1"], 1, cert, key);
    cp = await startTestControlPlane({ warmPool: 0, tls: [{ cert, key }] });
    h2 = connect(cp.url, { ca: ca.cert });
  });
  afterAll(async () => {
    h2?.close();
    await cp?.close();
    ca?.remove();
  });

  const send2 = (method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const req = h2.request({ ":method": method, ":path": path, ...headers });
      const chunks: Buffer[] = [];
      let head: Record<string, string | string[] | undefined> = {};
      req.on("response", (h) => (head = h as Record<string, string | string[] | undefined>));
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => resolve({ status: Number(head[":status"]), headers: head, body: Buffer.concat(chunks).toString() }));
      req.on("error", reject);
      req.end(body);
    });

  it("sets a Secure cookie and checks the origin against :authority", async () => {
    expect(cp.url).toMatch(/^https:/);
    const origin = cp.url;
    const ok = await send2("POST", "/dashboard/session", { "content-type": "application/json", origin, "sec-fetch-site": "same-origin" }, JSON.stringify({ api_key: cp.apiKey }));
    expect(ok.status).toBe(200);
    expect(String(ok.headers["set-cookie"])).toMatch(/; HttpOnly; SameSite=Strict; Secure$/);
    const cookie = String(ok.headers["set-cookie"]).split(";")[0]!;
    const { csrf_token } = JSON.parse(ok.body) as { csrf_token: string };
    const json = { "content-type": "application/json", cookie, "x-csrf-token": csrf_token };
    const path = "/dashboard/api/e2b/sandboxes/nosuchsandbox/timeout";
    const body = JSON.stringify({ timeout: 60 });
    expect((await send2("POST", path, { ...json, origin, "sec-fetch-site": "same-origin" }, body)).status).toBe(404);
    expect((await send2("POST", path, { ...json, origin: "https://evil.example" }, body)).status).toBe(403);
    expect((await send2("GET", "/dashboard/api/workspace/sandboxes", { cookie })).status).toBe(200);
    const page = await send2("GET", "/dashboard/");
    expect(page.status).toBe(200);
    expect(page.body).toContain('<div id="app">');
  });
});
