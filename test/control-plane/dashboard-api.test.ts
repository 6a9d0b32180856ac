import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";

// The routes the dashboard's pages added, over HTTP against a real server (no sandbox needed): sign-in rate
// limiting per client address, API keys (list, create shown once, revoke, the session's own refused), the
// audit log's action filter, newest-first order and CSV export, and the host's capacity. Each refuses without
// a session (test/control-plane/dashboard-auth.test.ts has every route's 401 and CSRF refusals).

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

function send(base: string, method: string, path: string, headers: Record<string, string> = {}, body?: string, localAddress?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, base), { method, headers, ...(localAddress ? { localAddress } : {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("the dashboard's own routes", () => {
  let cp: TestControlPlane;
  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 0 });
  });
  afterAll(async () => {
    await cp?.close();
  });

  const json = { "content-type": "application/json" };
  const signIn = (key: string, localAddress?: string) => send(cp.url, "POST", "/dashboard/session", json, JSON.stringify({ api_key: key }), localAddress);
  const session = async (key = cp.apiKey) => {
    const a = await signIn(key);
    expect(a.status).toBe(200);
    const { csrf_token, key_id } = JSON.parse(a.body) as { csrf_token: string; key_id: string };
    return { cookie: String(a.headers["set-cookie"]).split(";")[0]!, csrf: csrf_token, keyId: key_id };
  };

  it("answers 429 with Retry-After to an address that sent too many wrong keys, and only to that address", async () => {
    const wrong = `e2b_${"1".repeat(40)}`;
    // 127.0.0.3 is another client address on the loopback: its wrong keys do not count against 127.0.0.1.
    for (let i = 0; i < 10; i++) expect((await signIn(wrong, "127.0.0.3")).status).toBe(401);
    const limited = await signIn(wrong, "127.0.0.3");
    expect(limited.status).toBe(429);
    const retry = Number(limited.headers["retry-after"]);
    expect(retry).toBeGreaterThanOrEqual(1);
    expect(retry).toBeLessThanOrEqual(60);
    expect(JSON.parse(limited.body)).toMatchObject({ error: "rate_limited", message: expect.stringContaining("try again in") });
    // Even the right key waits: the limit is checked before any key is.
    expect((await signIn(cp.apiKey, "127.0.0.3")).status).toBe(429);
    // Another address signs in as usual.
    expect((await signIn(cp.apiKey, "127.0.0.1")).status).toBe(200);
  });

  it("lists keys masked, creates one shown once, revokes it (then it is refused everywhere), and will not revoke its own", async () => {
    const { cookie, csrf, keyId } = await session();
    const post = (path: string, body: unknown) => send(cp.url, "POST", path, { cookie, "x-csrf-token": csrf, ...json }, JSON.stringify(body));
    const del = (path: string) => send(cp.url, "DELETE", path, { cookie, "x-csrf-token": csrf });

    const before = JSON.parse((await send(cp.url, "GET", "/dashboard/api/keys", { cookie })).body) as { id: string; mask: string }[];
    expect(before.map((k) => k.id)).toContain(keyId);
    expect(JSON.stringify(before)).not.toContain(cp.apiKey);

    expect((await post("/dashboard/api/keys", {})).status).toBe(400);
    expect((await post("/dashboard/api/keys", { name: "x".repeat(101) })).status).toBe(400);
    const made = await post("/dashboard/api/keys", { name: "ci <b>bot</b>" });
    expect(made.status).toBe(201);
    const created = JSON.parse(made.body) as { id: string; key: string; name: string; mask: string };
    expect(created.key).toMatch(/^e2b_[0-9a-f]{40}$/);
    expect(created.name).toBe("ci <b>bot</b>");
    // The new key works with the E2B REST API, and the list never shows it again.
    expect((await send(cp.url, "GET", "/v2/sandboxes", { "x-api-key": created.key })).status).toBe(200);
    const list = (await send(cp.url, "GET", "/dashboard/api/keys", { cookie })).body;
    expect(list).toContain(created.id);
    expect(list).not.toContain(created.key);

    // The session's own key: refused, and it still works.
    const own = await del(`/dashboard/api/keys/${keyId}`);
    expect(own.status).toBe(409);
    expect(JSON.parse(own.body).message).toContain("sign in with another key");
    expect((await send(cp.url, "GET", "/dashboard/api/keys", { cookie })).status).toBe(200);

    // A session of the new key, then the key revoked from the first session.
    const other = await session(created.key);
    expect((await del(`/dashboard/api/keys/${created.id}`)).status).toBe(200);
    expect((await del(`/dashboard/api/keys/${created.id}`)).status).toBe(404);
    expect((await del("/dashboard/api/keys/not-a-key")).status).toBe(404);
    expect((await send(cp.url, "GET", "/v2/sandboxes", { "x-api-key": created.key })).status).toBe(401);
    expect((await signIn(created.key)).status).toBe(401);
    // Its session ends: it can neither read keys nor make one.
    expect((await send(cp.url, "GET", "/dashboard/api/keys", { cookie: other.cookie })).status).toBe(401);
    const revokedMakes = await send(cp.url, "POST", "/dashboard/api/keys", { cookie: other.cookie, "x-csrf-token": other.csrf, ...json }, JSON.stringify({ name: "sneaky" }));
    expect(revokedMakes.status).toBe(401);
    const names = (JSON.parse((await send(cp.url, "GET", "/dashboard/api/keys", { cookie })).body) as { name: string }[]).map((k) => k.name);
    expect(names).not.toContain("sneaky");

    // Changes are audited under the dashboard, with the key's id (never the key).
    const audit = (await send(cp.url, "GET", "/dashboard/api/workspace/audit?action=%2Fdashboard%2Fapi%2Fkeys", { cookie })).body;
    expect(audit).toContain(`"message":"${created.id}"`);
    expect(audit).not.toContain(created.key);
  });

  it("filters the audit log by action, reads it newest first, and exports it as streamed CSV", async () => {
    const { cookie } = await session();
    await send(cp.url, "GET", "/dashboard/api/e2b/v2/sandboxes", { cookie });
    await send(cp.url, "GET", "/dashboard/api/e2b/v2/sandboxes", { cookie });
    const lines = (body: string) => body.trim().split("\n").map((l) => JSON.parse(l) as { id: number; action: string });
    const filtered = lines((await send(cp.url, "GET", "/dashboard/api/workspace/audit?action=GET%20%2Fv2%2Fsandboxes", { cookie })).body);
    expect(filtered.length).toBeGreaterThanOrEqual(2);
    expect(filtered.every((e) => e.action === "GET /v2/sandboxes")).toBe(true);
    const newest = lines((await send(cp.url, "GET", "/dashboard/api/workspace/audit?order=newest&limit=3", { cookie })).body);
    expect(newest.length).toBe(3);
    expect(newest[0]!.id).toBeGreaterThan(newest[1]!.id);
    expect(newest[1]!.id).toBeGreaterThan(newest[2]!.id);
    expect((await send(cp.url, "GET", "/dashboard/api/workspace/audit?order=sideways", { cookie })).status).toBe(400);
    expect((await send(cp.url, "GET", "/dashboard/api/workspace/audit?format=xml", { cookie })).status).toBe(400);

    const csv = await send(cp.url, "GET", "/dashboard/api/workspace/audit?format=csv&action=GET%20%2Fv2%2Fsandboxes", { cookie });
    expect(csv.status).toBe(200);
    expect(csv.headers["content-type"]).toBe("text/csv; charset=utf-8");
    expect(csv.headers["content-disposition"]).toBe('attachment; filename="locale2b-audit.csv"');
    expect(csv.headers["transfer-encoding"]).toBe("chunked");
    const rows = csv.body.trimEnd().split("\r\n");
    expect(rows[0]).toBe("id,time,actor,api,action,sandbox_id,result,status,message,duration_ms,details");
    expect(rows.length - 1).toBe(filtered.length + 0 /* the JSON read above is itself not a match */);
    expect(rows.slice(1).every((r) => r.split(",")[4] === "GET /v2/sandboxes")).toBe(true);
  });

  it("shows the host's capacity: sandboxes and memory against the limits, warm pools, starts", async () => {
    const { cookie } = await session();
    const a = await send(cp.url, "GET", "/dashboard/api/workspace/capacity", { cookie });
    expect(a.status).toBe(200);
    const c = JSON.parse(a.body) as { sandboxes: { total: number; max: number }; memory_mb: { used: number; budget: number }; vcpus: { used: number; budget: number }; warm_pools: unknown[]; host: { memory_total_bytes: number } };
    expect(c.sandboxes.total).toBe(0);
    expect(c.sandboxes.max).toBeGreaterThan(0);
    expect(c.memory_mb).toEqual({ used: 0, budget: expect.any(Number) });
    expect(c.vcpus).toEqual({ used: 0, budget: expect.any(Number) });
    expect(c.vcpus.budget).toBeGreaterThanOrEqual(256);
    expect(c.warm_pools).toEqual([]);
    expect(c.host.memory_total_bytes).toBeGreaterThan(0);
    expect((await send(cp.url, "GET", "/workspace/capacity")).status).toBe(401);
  });
});
