// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, statfsSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ENVD_VERSION } from "../../envd/version.js";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { ENVD_SPEC, specAvailable, validatorFor } from "../helpers/openapi.js";

const HAVE_SPEC = specAvailable(ENVD_SPEC);
if (!HAVE_SPEC) console.warn(`skipping OpenAPI schema checks: ${ENVD_SPEC} is absent`);
const schema = (ref: string) => (HAVE_SPEC ? validatorFor(ENVD_SPEC, ref) : undefined);
const errorSchema = schema("#/components/schemas/Error");
const envVarsSchema = schema("#/components/schemas/EnvVars");
const metricsSchema = schema("#/components/schemas/Metrics");
const uploadSchema = schema("#/components/responses/UploadSuccess");
const UNAUTHORIZED = "unauthorized access, please provide a valid access token or method signing if supported";

let envd: TestEnvd;

beforeAll(async () => {
  envd = await startTestEnvd({ defaultUser: "root" });
});
afterAll(async () => {
  await envd?.close();
});
afterEach(() => {
  const state = envd.context.state;
  state.accessToken = undefined;
  state.envVars = {};
  state.lastInitTimestamp = 0;
  state.defaultUser = "root";
  state.defaultWorkdir = undefined;
});

function conforms(validate: ReturnType<typeof schema>, body: unknown): void {
  if (validate) expect(validate(body), validate.errorText).toBe(true);
}

async function expectError(res: Response, status: number, message?: string | RegExp): Promise<void> {
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  const body = (await res.json()) as { code: number; message: string };
  conforms(errorSchema, body);
  expect(body.code).toBe(status);
  if (message !== undefined) expect(body.message).toMatch(message);
}

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(envd.url + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
const get = (path: string, headers: Record<string, string> = {}) => fetch(envd.url + path, { headers });

describe("GET /health", () => {
  it("answers 204 with Cache-Control: no-store, even when a token is set and none is sent", async () => {
    envd.context.state.accessToken = "health-token";
    const res = await get("/health");
    expect(res.status).toBe(204);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(await res.text()).toBe("");
  });
});

describe("POST /init and GET /envs", () => {
  it("lists E2B_SANDBOX=true before any /init, as E2B's envd does", async () => {
    const envs = await get("/envs");
    expect(envs.status).toBe(200);
    expect(await envs.json()).toEqual({ E2B_SANDBOX: "true" });
  });

  it("replaces env vars and reports X-Envd-Version", async () => {
    const res = await post("/init", { envVars: { A: "1", SHARED: "x" } });
    expect(res.status).toBe(204);
    expect(res.headers.get("x-envd-version")).toBe(ENVD_VERSION);
    expect(await (await post("/init", { envVars: { B: "2" } })).status).toBe(204);
    const envs = await get("/envs");
    expect(envs.status).toBe(200);
    const body = await envs.json();
    conforms(envVarsSchema, body);
    expect(body).toEqual({ E2B_SANDBOX: "true", B: "2" });
  });

  it("sets the access token; then /envs and /init need it (header, or the same token in the body)", async () => {
    expect((await post("/init", { accessToken: "tok-1" })).status).toBe(204);
    expect(envd.context.state.accessToken).toBe("tok-1");
    await expectError(await get("/envs"), 401, UNAUTHORIZED);
    await expectError(await get("/envs", { "x-access-token": "wrong" }), 401, UNAUTHORIZED);
    expect((await get("/envs", { "x-access-token": "tok-1" })).status).toBe(200);

    await expectError(await post("/init", { envVars: { X: "1" } }), 401, UNAUTHORIZED);
    await expectError(await post("/init", { accessToken: "tok-2" }), 401);
    expect(envd.context.state.accessToken).toBe("tok-1");
    expect(envd.context.state.envVars).toEqual({});
    expect((await post("/init", { accessToken: "tok-1", envVars: { X: "1" } })).status).toBe(204);
    expect((await post("/init", { accessToken: "tok-2" }, { "x-access-token": "tok-1" })).status).toBe(204);
    expect(envd.context.state.accessToken).toBe("tok-2");
    expect(envd.context.state.envVars).toEqual({ X: "1" });
  });

  it("ignores a body whose timestamp is not newer than the last applied one, still answering 204", async () => {
    expect((await post("/init", { timestamp: "2026-01-02T00:00:00.000000002Z", envVars: { V: "new" } })).status).toBe(204);
    const older = await post("/init", { timestamp: "2026-01-02T00:00:00.000000001Z", envVars: { V: "old" }, defaultUser: "nobody-at-all" });
    expect(older.status).toBe(204);
    expect(older.headers.get("x-envd-version")).toBe(ENVD_VERSION);
    expect(envd.context.state.envVars).toEqual({ V: "new" });
    expect((await post("/init", { timestamp: "2026-01-03T01:00:00+01:00", envVars: { V: "newer" } })).status).toBe(204);
    expect(envd.context.state.envVars).toEqual({ V: "newer" });
  });

  it("sets the default user and workdir; an unknown user is a 400 and changes nothing", async () => {
    await expectError(await post("/init", { defaultUser: "no-such-user-here", envVars: { Z: "1" } }), 400, /no-such-user-here/);
    expect(envd.context.state.envVars).toEqual({});
    expect((await post("/init", { defaultUser: "root", defaultWorkdir: "/tmp" })).status).toBe(204);
    expect(envd.context.state.defaultUser).toBe("root");
    expect(envd.context.state.defaultWorkdir).toBe("/tmp");
  });

  it("rejects bad JSON, wrong field types and oversized bodies", async () => {
    await expectError(await post("/init", "{not json"), 400, /invalid JSON/);
    await expectError(await post("/init", "[1,2]"), 400, /JSON object/);
    await expectError(await post("/init", { envVars: { A: 1 } }), 400, /envVars/);
    await expectError(await post("/init", { timestamp: "yesterday" }), 400, /timestamp/);
    await expectError(await post("/init", { x: "y".repeat(1024 * 1024 + 10) }), 413);
    expect((await post("/init", "")).status).toBe(204);
  });
});

describe("GET /metrics", () => {
  it("reports CPU, memory and disk in envd's Metrics shape", async () => {
    envd.context.state.accessToken = "m-token";
    await expectError(await get("/metrics"), 401);
    const before = Math.floor(Date.now() / 1000);
    const res = await get("/metrics", { "x-access-token": "m-token" });
    const after = Math.ceil(Date.now() / 1000);
    expect(res.status).toBe(200);
    const m = (await res.json()) as Record<string, number>;
    conforms(metricsSchema, m);
    expect(Object.keys(m).sort()).toEqual(
      ["cpu_count", "cpu_used_pct", "disk_total", "disk_used", "mem_cache", "mem_total", "mem_total_mib", "mem_used", "mem_used_mib", "ts"].sort(),
    );
    expect(m.ts).toBeGreaterThanOrEqual(before);
    expect(m.ts).toBeLessThanOrEqual(after);
    expect(m.cpu_count).toBe(availableParallelism());
    expect(m.cpu_used_pct).toBeGreaterThanOrEqual(0);
    expect(m.cpu_used_pct).toBeLessThanOrEqual(100);
    const memTotal = Number(/^MemTotal:\s+(\d+)/m.exec(readFileSync("/proc/meminfo", "utf8"))![1]) * 1024;
    expect(m.mem_total).toBe(memTotal);
    expect(m.mem_total_mib).toBe(Math.floor(memTotal / 1024 / 1024));
    expect(m.mem_used).toBeGreaterThan(0);
    expect(m.mem_used).toBeLessThanOrEqual(m.mem_total);
    expect(m.mem_used_mib).toBe(Math.floor(m.mem_used / 1024 / 1024));
    const fs = statfsSync("/");
    expect(m.disk_total).toBe(fs.blocks * fs.bsize);
    expect(m.disk_used).toBeGreaterThan(0);
    expect(m.disk_used).toBeLessThanOrEqual(m.disk_total);
  });
});

describe("routing", () => {
  it("answers 405 with Allow for a wrong method on a known path", async () => {
    for (const [method, path, allow] of [["DELETE", "/files", "GET, HEAD, POST"], ["GET", "/init", "POST"], ["POST", "/health", "GET, HEAD"], ["PUT", "/envs", "GET"]]) {
      const res = await fetch(envd.url + path, { method });
      await expectError(res, 405, new RegExp(method!));
      expect(res.headers.get("allow")).toBe(allow);
    }
  });

  it("never serves the orchestrator-internal endpoints", async () => {
    for (const path of ["/freeze", "/unfreeze", "/collapse", "/fsfreeze", "/fsthaw", "/upgrade"]) {
      await expectError(await fetch(envd.url + path, { method: "POST" }), 404);
    }
  });
});

/** E2B's v1 signature, computed independently of envd's code. */
function sign(path: string, op: "read" | "write", username: string, token: string, exp?: number): string {
  const payload = [path, op, username, token, ...(exp === undefined ? [] : [String(exp)])].join(":");
  return "v1_" + createHash("sha256").update(payload).digest("base64").replace(/=/g, "");
}

describe("signed /files URLs", () => {
  const token = "sig-token-123";
  let dir: string;
  beforeAll(() => {
    dir = join(envd.dir, "signed");
    mkdirSync(dir);
    writeFileSync(join(dir, "r.txt"), "readable");
  });
  const url = (params: Record<string, string | number>) =>
    `${envd.url}/files?${new URLSearchParams(Object.entries(params).map(([k, v]): [string, string] => [k, String(v)]))}`;
  const upload = (params: Record<string, string | number>, data = "written") =>
    fetch(url(params), { method: "POST", headers: { "content-type": "application/octet-stream" }, body: data });

  it("accepts a valid read signature (with and without username/expiration) and rejects bad ones", async () => {
    envd.context.state.accessToken = token;
    const path = join(dir, "r.txt");
    await expectError(await fetch(url({ path })), 401, UNAUTHORIZED);
    expect(await (await fetch(url({ path }), { headers: { "x-access-token": token } })).text()).toBe("readable");
    expect(await (await fetch(url({ path, signature: sign(path, "read", "", token) }))).text()).toBe("readable");
    const withUser = url({ path, username: "root", signature: sign(path, "read", "root", token) });
    expect((await fetch(withUser)).status).toBe(200);
    const exp = Math.floor(Date.now() / 1000) + 600;
    expect((await fetch(url({ path, signature: sign(path, "read", "", token, exp), signature_expiration: exp }))).status).toBe(200);

    const expired = Math.floor(Date.now() / 1000) - 60;
    await expectError(await fetch(url({ path, signature: sign(path, "read", "", token, expired), signature_expiration: expired })), 401, /expired/);
    await expectError(await fetch(url({ path, signature: sign(path, "read", "", token), signature_expiration: exp })), 401);
    await expectError(await fetch(url({ path, signature: sign(path, "read", "", "other-token") })), 401);
    await expectError(await fetch(url({ path, signature: sign(path, "write", "", token) })), 401);
    await expectError(await fetch(url({ path: join(dir, "x"), signature: sign(path, "read", "", token) })), 401);
  });

  it("accepts a valid write signature for uploads and rejects a read one", async () => {
    envd.context.state.accessToken = token;
    const path = join(dir, "w.txt");
    await expectError(await upload({ path }), 401, UNAUTHORIZED);
    await expectError(await upload({ path, signature: sign(path, "read", "", token) }), 401);
    const res = await upload({ path, signature: sign(path, "write", "", token) });
    expect(res.status).toBe(200);
    const body = await res.json();
    conforms(uploadSchema, body);
    expect(body).toEqual([{ path, name: "w.txt", type: "file" }]);
    expect(readFileSync(path, "utf8")).toBe("written");
  });
});
