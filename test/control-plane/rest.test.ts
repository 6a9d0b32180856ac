import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MISSING_KEY_MESSAGE } from "../../control-plane/api/auth.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { CONTROL_PLANE_SPEC, specAvailable, validatorFor, type SchemaValidator } from "../helpers/openapi.js";

// E2B's control-plane REST API against a real control plane (process runtime),
// with raw fetch; every JSON body is checked against E2B's OpenAPI schemas.

const HAVE_SPEC = specAvailable(CONTROL_PLANE_SPEC);
const schema = (name: string): SchemaValidator => validatorFor(CONTROL_PLANE_SPEC, `#/components/schemas/${name}`);

function valid(name: string, data: unknown): void {
  if (!HAVE_SPEC) return;
  const v = schema(name);
  expect(v(data), `${name}: ${v.errorText}\n${JSON.stringify(data)}`).toBe(true);
}

interface Res {
  status: number;
  headers: Headers;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

describe.skipIf(!HAVE_SPEC)("E2B REST API", () => {
  let cp: TestControlPlane;
  const run = randomBytes(4).toString("hex");
  const ids: string[] = [];

  async function api(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Res> {
    const res = await fetch(cp.url + path, {
      method,
      headers: { "x-api-key": cp.apiKey, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
      ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let parsed: unknown = text;
    if ((res.headers.get("content-type") ?? "").startsWith("application/json")) parsed = JSON.parse(text);
    return { status: res.status, headers: res.headers, body: parsed };
  }

  /** An error answer: status, `Error` schema, body code = status. */
  function expectError(res: Res, status: number, message?: RegExp): void {
    expect(res.status, JSON.stringify(res.body)).toBe(status);
    valid("Error", res.body);
    expect(res.body.code).toBe(status);
    if (message) expect(res.body.message).toMatch(message);
  }

  beforeAll(async () => {
    cp = await startTestControlPlane();
  });

  afterAll(async () => {
    for (const id of ids) await cp?.manager.kill(id).catch(() => undefined);
    await cp?.close();
  });

  describe("requests that create nothing", () => {
    it("needs a valid API key on every route (401 with the hint)", async () => {
      for (const [method, path] of [
        ["GET", "/v2/sandboxes"],
        ["POST", "/v2/sandboxes"],
        ["GET", "/sandboxes/abc"],
        ["DELETE", "/sandboxes/abc"],
        ["POST", "/sandboxes/abc/pause"],
        ["GET", "/sandboxes/metrics?sandbox_ids=abc"],
      ] as const) {
        expectError(await api(method, path, undefined, { "x-api-key": "" }), 401, new RegExp(MISSING_KEY_MESSAGE.slice(0, 30)));
        expectError(await api(method, path, undefined, { "x-api-key": `e2b_${"0".repeat(40)}` }), 401);
      }
    });

    it("answers unknown routes 404 and wrong methods 405, as JSON", async () => {
      expectError(await api("GET", "/nope"), 404);
      expectError(await api("GET", "/sandboxes/a/b/c"), 404);
      const res = await api("PUT", "/v2/sandboxes");
      expectError(res, 405);
      expect(res.headers.get("allow")).toContain("GET");
      expectError(await api("PATCH", "/sandboxes/abc"), 405);
    });

    it("rejects bad create bodies with 400/404/413 naming the problem", async () => {
      expectError(await api("POST", "/v2/sandboxes", "{not json"), 400, /^invalid JSON body: /);
      expectError(await api("POST", "/sandboxes", "[1,2]"), 400, /invalid JSON body/);
      expectError(await api("POST", "/v2/sandboxes", {}), 400, /templateID/);
      expectError(await api("POST", "/sandboxes", { templateID: 5 }), 400, /templateID/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "base", timeout: "10" }), 400, /'timeout'/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "base", timeout: 1.5 }), 400, /'timeout'/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "base", metadata: { a: 1 } }), 400, /metadata\.a/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "base", autoResume: true }), 400, /autoResume/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "no-such-template" }), 404, /no-such-template/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "base", timeout: 10 * 24 * 3600 }), 400, /Timeout cannot be greater/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "base", timeout: 0 }), 400, /timeout/);
      expectError(await api("POST", "/v2/sandboxes", { templateID: "base", mcp: { x: {} } }), 400, /mcp/);
      const noMemory = { templateID: "base", autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } };
      expectError(await api("POST", "/v2/sandboxes", noMemory), 400, /autoPauseMemory/);
      const open = { templateID: "base", secure: false, network: { allowPublicTraffic: false } };
      expectError(await api("POST", "/sandboxes", open), 400, /allowPublicTraffic/);
      const big = JSON.stringify({ templateID: "base", metadata: { pad: "x".repeat(2 * 1024 * 1024) } });
      expectError(await api("POST", "/v2/sandboxes", big), 413);
    });

    it("answers 404 JSON for unknown sandboxes on every per-sandbox route", async () => {
      const id = "doesnotexist0";
      expectError(await api("GET", `/sandboxes/${id}`), 404, new RegExp(id));
      expectError(await api("DELETE", `/sandboxes/${id}`), 404);
      expectError(await api("POST", `/sandboxes/${id}/pause`), 404);
      expectError(await api("POST", `/sandboxes/${id}/timeout`, { timeout: 10 }), 404);
      expectError(await api("POST", `/sandboxes/${id}/refreshes`, {}), 404);
      expectError(await api("POST", `/v2/sandboxes/${id}/connect`, {}), 404);
      expectError(await api("POST", `/sandboxes/${id}/connect`, { timeout: 10 }), 404);
      expectError(await api("POST", `/sandboxes/${id}/resume`, {}), 404);
      expectError(await api("GET", `/sandboxes/${id}/metrics`), 404);
      expectError(await api("GET", `/sandboxes/${id}/logs`), 404);
      expectError(await api("GET", `/v2/sandboxes/${id}/logs`), 404);
    });

    it("answers 429 with Retry-After when the server is full", async () => {
      const full = await startTestControlPlane({ limits: { maxSandboxes: 0 } });
      try {
        const res = await fetch(`${full.url}/v2/sandboxes`, {
          method: "POST",
          headers: { "x-api-key": full.apiKey, "content-type": "application/json" },
          body: JSON.stringify({ templateID: "base" }),
        });
        const body = await res.json();
        expectError({ status: res.status, headers: res.headers, body }, 429, /limit/);
        expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      } finally {
        await full.close();
      }
    });
  });

  describe("with sandboxes", () => {
    const meta = { run, "k y": "v&1=2" };

    beforeAll(async () => {
      // v1 create with a chunked body (as the JS SDK sends it), then two v2 creates.
      const chunked = new ReadableStream<Uint8Array>({
        start(c) {
          const text = JSON.stringify({
            templateID: "base",
            timeout: 120,
            secure: true,
            allow_internet_access: true,
            network: { allowPublicTraffic: false },
            metadata: meta,
            envVars: { FOO: "bar" },
          });
          c.enqueue(new TextEncoder().encode(text.slice(0, 10)));
          c.enqueue(new TextEncoder().encode(text.slice(10)));
          c.close();
        },
      });
      const res = await fetch(`${cp.url}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
        body: chunked,
        duplex: "half",
      } as RequestInit);
      const first = (await res.json()) as { sandboxID: string; trafficAccessToken: string | null };
      expect(res.status, JSON.stringify(first)).toBe(201);
      valid("Sandbox", first);
      // Public traffic off: the traffic token is handed out (for user ports).
      expect(first.trafficAccessToken).toMatch(/^\w{16,}$/);
      ids.push(first.sandboxID);
      for (let i = 0; i < 2; i++) {
        const r = await api("POST", "/v2/sandboxes", { templateID: "base", metadata: { ...meta, n: String(i) }, autoPause: i === 1 });
        expect(r.status, JSON.stringify(r.body)).toBe(201);
        valid("Sandbox", r.body);
        ids.push(r.body.sandboxID);
      }
    });

    it("returns Sandbox on create: clientID, envdVersion, envdAccessToken, domain (getHost: <port>-<id>.localhost:<port>)", async () => {
      const r = await api("GET", `/sandboxes/${ids[0]}`);
      expect(r.status).toBe(200);
      valid("SandboxDetail", r.body);
      expect(r.body).toMatchObject({
        sandboxID: ids[0],
        templateID: "base",
        clientID: "6532622b",
        state: "running",
        metadata: meta,
        domain: `localhost:${new URL(cp.url).port}`,
        lifecycle: { onTimeout: "kill", autoResume: false },
        network: { allowPublicTraffic: false },
        allowInternetAccess: true,
      });
      expect(r.body.envdAccessToken).toMatch(/^\w{16,}$/);
      expect(Date.parse(r.body.endAt) - Date.parse(r.body.startedAt)).toBeGreaterThanOrEqual(119_000);
      const auto = await api("GET", `/sandboxes/${ids[2]}`);
      expect(auto.body.lifecycle).toEqual({ onTimeout: "pause", autoResume: false });
    });

    it("lists with the SDK's metadata encoding, state, order and paging (X-Next-Token)", async () => {
      // As the JS SDK: encode each key and value, join as a query string, and the query encodes it again.
      const inner = new URLSearchParams(Object.fromEntries(Object.entries(meta).map(([k, v]) => [encodeURIComponent(k), encodeURIComponent(v)])));
      const metadata = encodeURIComponent(inner.toString());
      const page1 = await api("GET", `/v2/sandboxes?metadata=${metadata}&limit=2&state=running,paused`);
      expect(page1.status).toBe(200);
      for (const s of page1.body) valid("ListedSandbox", s);
      expect(page1.body).toHaveLength(2);
      const token = page1.headers.get("x-next-token");
      expect(token).toBeTruthy();
      expect(page1.headers.get("x-total-running")).toBe("3");
      const page2 = await api("GET", `/v2/sandboxes?metadata=${metadata}&limit=2&nextToken=${encodeURIComponent(token!)}`);
      expect(page2.status).toBe(200);
      expect(page2.body).toHaveLength(1);
      expect(page2.headers.get("x-next-token")).toBeNull();
      const listed = [...page1.body, ...page2.body].map((s: { sandboxID: string }) => s.sandboxID);
      expect(new Set(listed)).toEqual(new Set(ids));
      // desc (default) is newest first; asc the reverse.
      const desc = (await api("GET", `/v2/sandboxes?metadata=${metadata}`)).body.map((s: { sandboxID: string }) => s.sandboxID);
      const asc = (await api("GET", `/v2/sandboxes?metadata=${metadata}&order=asc`)).body.map((s: { sandboxID: string }) => s.sandboxID);
      expect(asc).toEqual([...desc].reverse());
      // A filter that matches one, a plain (single-encoded) filter, no paused ones yet.
      const one = await api("GET", `/v2/sandboxes?metadata=${encodeURIComponent(`run=${run}&n=1`)}`);
      expect(one.body.map((s: { sandboxID: string }) => s.sandboxID)).toEqual([ids[2]]);
      expect((await api("GET", `/v2/sandboxes?metadata=${metadata}&state=paused`)).body).toEqual([]);
      const tpl = await api("GET", `/v2/sandboxes?metadata=${metadata}&template=base&startedAfter=${encodeURIComponent("2000-01-01T00:00:00Z")}`);
      expect(tpl.body).toHaveLength(3);
      expect((await api("GET", `/v2/sandboxes?metadata=${metadata}&template=other`)).body).toEqual([]);
      // Deprecated list: running only, same filter.
      const v1 = await api("GET", `/sandboxes?metadata=${metadata}`);
      expect(v1.status).toBe(200);
      for (const s of v1.body) valid("ListedSandbox", s);
      expect(v1.body).toHaveLength(3);
    });

    it("rejects bad list parameters with 400", async () => {
      expectError(await api("GET", "/v2/sandboxes?limit=0"), 400, /limit/);
      expectError(await api("GET", "/v2/sandboxes?limit=101"), 400, /limit/);
      expectError(await api("GET", "/v2/sandboxes?state=sleeping"), 400, /state/);
      expectError(await api("GET", "/v2/sandboxes?order=up"), 400, /order/);
      expectError(await api("GET", "/v2/sandboxes?nextToken=%%%"), 400, /nextToken/);
      expectError(await api("GET", "/v2/sandboxes?startedAfter=yesterday"), 400, /startedAfter/);
      expectError(await api("GET", "/v2/sandboxes?metadata=%25E0%25A4%25A"), 400, /metadata/);
    });

    it("sets the timeout and refreshes (204)", async () => {
      const before = Date.parse((await api("GET", `/sandboxes/${ids[0]}`)).body.endAt);
      expect((await api("POST", `/sandboxes/${ids[0]}/timeout`, { timeout: 3600 })).status).toBe(204);
      const after = Date.parse((await api("GET", `/sandboxes/${ids[0]}`)).body.endAt);
      expect(after).toBeGreaterThan(before);
      expectError(await api("POST", `/sandboxes/${ids[0]}/timeout`, {}), 400, /timeout/);
      expectError(await api("POST", `/sandboxes/${ids[0]}/timeout`, { timeout: 10 ** 9 }), 400, /Timeout cannot be greater/);
      expect((await api("POST", `/sandboxes/${ids[0]}/refreshes`, { duration: 60 })).status).toBe(204);
      expect((await api("POST", `/sandboxes/${ids[0]}/refreshes`)).status).toBe(204);
      expectError(await api("POST", `/sandboxes/${ids[0]}/refreshes`, { duration: 3601 }), 400, /duration/);
    });

    it("serves metrics: one current sample per sandbox, and the batch endpoint", async () => {
      const one = await api("GET", `/sandboxes/${ids[0]}/metrics`);
      expect(one.status).toBe(200);
      expect(one.body).toHaveLength(1);
      valid("SandboxMetric", one.body[0]);
      expect(one.body[0].memTotal).toBeGreaterThan(0);
      const many = await api("GET", `/sandboxes/metrics?sandbox_ids=${ids[0]},${ids[1]},unknownid`);
      expect(many.status).toBe(200);
      valid("SandboxesWithMetrics", many.body);
      expect(Object.keys(many.body.sandboxes).sort()).toEqual([ids[0], ids[1]].sort());
      expectError(await api("GET", "/sandboxes/metrics"), 400, /sandbox_ids/);
      expectError(await api("GET", `/sandboxes/${ids[0]}/metrics?start=abc`), 400, /start/);
      expectError(await api("GET", `/sandboxes/${ids[0]}/metrics?start=20&end=10`), 400, /after end/);
      const now = Math.floor(Date.now() / 1000);
      expect((await api("GET", `/sandboxes/${ids[0]}/metrics?start=${now - 60}&end=${now + 60}`)).status).toBe(200);
    });

    it("serves logs (v1 and v2)", async () => {
      const v1 = await api("GET", `/sandboxes/${ids[0]}/logs`);
      expect(v1.status).toBe(200);
      valid("SandboxLogs", v1.body);
      const v2 = await api("GET", `/v2/sandboxes/${ids[0]}/logs?direction=backward&limit=5&level=debug`);
      expect(v2.status).toBe(200);
      valid("SandboxLogsV2Response", v2.body);
      expect(v2.body.logs.length).toBeLessThanOrEqual(5);
      const none = await api("GET", `/v2/sandboxes/${ids[0]}/logs?search=${"no such text ".repeat(3)}`);
      expect(none.body).toEqual({ logs: [] });
      expectError(await api("GET", `/v2/sandboxes/${ids[0]}/logs?direction=sideways`), 400, /direction/);
      expectError(await api("GET", `/v2/sandboxes/${ids[0]}/logs?level=loud`), 400, /level/);
    });

    it("pauses (204, then 409) and connects (201 resumed, then 200), v1 and v2", async () => {
      const id = ids[1]!;
      expect((await api("POST", `/sandboxes/${id}/pause`, {})).status).toBe(204);
      expectError(await api("POST", `/sandboxes/${id}/pause`, { memory: true }), 409, /already paused/);
      const info = await api("GET", `/sandboxes/${id}`);
      valid("SandboxDetail", info.body);
      expect(info.body.state).toBe("paused");
      const paused = await api("GET", `/v2/sandboxes?state=paused&metadata=${encodeURIComponent(`run=${run}`)}`);
      expect(paused.body.map((s: { sandboxID: string }) => s.sandboxID)).toEqual([id]);
      expect((await api("GET", `/sandboxes?metadata=${encodeURIComponent(`run=${run}`)}`)).body).toHaveLength(2);

      const resumed = await api("POST", `/v2/sandboxes/${id}/connect`, {});
      expect(resumed.status).toBe(201);
      valid("Sandbox", resumed.body);
      expect(resumed.body.sandboxID).toBe(id);
      const again = await api("POST", `/v2/sandboxes/${id}/connect`, { timeout: 60 });
      expect(again.status).toBe(200);
      valid("Sandbox", again.body);
      expect(again.body.envdAccessToken).toBe(resumed.body.envdAccessToken);
      expectError(await api("POST", `/sandboxes/${id}/connect`, {}), 400, /timeout/);
      const v1 = await api("POST", `/sandboxes/${id}/connect`, { timeout: 60 });
      expect(v1.status).toBe(200);
      valid("Sandbox", v1.body);
      expect((await api("GET", `/sandboxes/${id}`)).body.state).toBe("running");

      // Deprecated resume: 409 while running, 201 once paused.
      expectError(await api("POST", `/sandboxes/${id}/resume`, {}), 409);
      expect((await api("POST", `/sandboxes/${id}/pause`)).status).toBe(204);
      const res = await api("POST", `/sandboxes/${id}/resume`, { timeout: 60 });
      expect(res.status).toBe(201);
      valid("Sandbox", res.body);
      expect((await api("GET", `/sandboxes/${id}`)).body.state).toBe("running");

      // Creates and resumes are timed into the control plane's metrics.
      const text = await (await fetch(`${cp.url}/metrics`)).text();
      const count = (name: string) => Number(new RegExp(`^${name}_count(?:\\{\\})? (\\d+)`, "m").exec(text)?.[1]);
      expect(count("locale2b_sandbox_create_seconds")).toBeGreaterThanOrEqual(3);
      expect(count("locale2b_sandbox_resume_seconds")).toBeGreaterThanOrEqual(2);
    });

    it("kills (204), then 404 with JSON code 404", async () => {
      const id = ids[2]!;
      const res = await fetch(`${cp.url}/sandboxes/${id}`, { method: "DELETE", headers: { "x-api-key": cp.apiKey } });
      expect(res.status).toBe(204);
      expect(await res.text()).toBe("");
      const again = await api("DELETE", `/sandboxes/${id}`);
      expectError(again, 404);
      expectError(await api("GET", `/sandboxes/${id}`), 404);
      const listed = await api("GET", `/v2/sandboxes?metadata=${encodeURIComponent(`run=${run}`)}`);
      expect(listed.body.map((s: { sandboxID: string }) => s.sandboxID)).not.toContain(id);
    });
  });
});
