// E2B's secrets with the real `e2b` JS SDK (Secret.create/list/getInfo/
// update/exists/destroy, Secret.fill) against a real control plane: every
// REST answer checked against E2B's OpenAPI spec; bad input, unknown ids and
// wrong keys; and the value nowhere it must not be: any response, the
// server's pino log, the events, the audit log, the SQLite files. Then from
// inside a sandbox (as `user` and as root): neither the key file nor the
// database can be reached.
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";
import { AuthenticationError, CommandExitError, Sandbox, Secret, SecretError, SecretNotFoundError } from "e2b";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { CONTROL_PLANE_SPEC, specAvailable, validatorFor } from "../helpers/openapi.js";
import { setEnv } from "../helpers/sdk.js";

const HAVE_SPEC = specAvailable(CONTROL_PLANE_SPEC);
const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const noSandbox = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;
if (noSandbox) console.warn(`e2b-js-secrets.test.ts: the escape tests are skipped: ${noSandbox}`);

/** Values no answer, log line, event, audit entry or database page may hold. */
const VALUE_1 = `canary-one-${process.pid}-9f2c4e1a7b`;
const VALUE_2 = `canary-two-${process.pid}-3d8e6b0c5f`;

let cp: TestControlPlane;
let restoreEnv = () => {};
const logLines: string[] = [];
/** Every response body this test read, raw. */
const bodies: string[] = [];

beforeAll(async () => {
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines.push(chunk.toString());
      done();
    },
  });
  cp = await startTestControlPlane({ runtime, warmPool: 0, log: pino({ level: "trace" }, sink) });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
}, 120_000);

afterAll(async () => {
  restoreEnv();
  await cp?.close();
}, 120_000);

async function api(method: string, path: string, body?: string, key = cp.apiKey): Promise<{ status: number; json: any; headers: Headers }> {
  const res = await fetch(`${cp.url}${path}`, {
    method,
    headers: { "x-api-key": key, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body } : {}),
  });
  const text = await res.text();
  bodies.push(text);
  return { status: res.status, json: text ? JSON.parse(text) : undefined, headers: res.headers };
}

function expectSchema(ref: string, data: unknown): void {
  if (!HAVE_SPEC) return;
  const v = validatorFor(CONTROL_PLANE_SPEC, ref);
  expect(v(data), `${ref}: ${v.errorText}`).toBe(true);
}

describe("secrets through the e2b JS SDK", { timeout: 120_000 }, () => {
  it("create, get, update (a new version), exists, destroy; names are lower-cased; no answer carries the value", async () => {
    const info = await Secret.create("Api-Token", VALUE_1, { metadata: { owner: "ci" } });
    expect(info).toMatchObject({ name: "api-token", version: 1, metadata: { owner: "ci" } });
    expect(info.secretId).toMatch(/^sec_[a-z0-9]+$/);
    expect(info.createdAt).toBeInstanceOf(Date);

    const raw = await api("GET", `/secrets/${info.secretId}`);
    expect(raw.status).toBe(200);
    expectSchema("#/components/schemas/Secret", raw.json);
    expect(Object.keys(raw.json).sort()).toEqual(["createdAt", "currentVersion", "metadata", "name", "secretID", "updatedAt"]);
    const byName = await Secret.getInfo("API-TOKEN");
    expect(byName.secretId).toBe(info.secretId);

    const v2 = await Secret.update("api-token", VALUE_2);
    expect(v2).toMatchObject({ secretId: info.secretId, version: 2, metadata: { owner: "ci" } });
    expect(v2.updatedAt.getTime()).toBeGreaterThanOrEqual(info.updatedAt.getTime());
    const v3 = await Secret.update(info.secretId, VALUE_2, { metadata: { owner: "ops" } });
    expect(v3).toMatchObject({ version: 3, metadata: { owner: "ops" } });
    const upd = await api("POST", `/secrets/${info.secretId}`, JSON.stringify({ value: VALUE_1 }));
    expect(upd.status).toBe(200);
    expectSchema("#/components/schemas/Secret", upd.json);
    expect(upd.json.currentVersion).toBe(4);

    expect(await Secret.exists("api-token")).toBe(true);
    expect(Secret.fill("api-token")).toBe("${e2b.secrets.api-token}");
    expect(await Secret.destroy("api-token")).toBe(true);
    expect(await Secret.destroy("api-token")).toBe(false);
    expect(await Secret.exists(info.secretId)).toBe(false);
    await expect(Secret.getInfo(info.secretId)).rejects.toBeInstanceOf(SecretNotFoundError);
    await expect(Secret.update("api-token", "x")).rejects.toBeInstanceOf(SecretNotFoundError);
    const raw404 = await api("DELETE", `/secrets/${info.secretId}`);
    expect(raw404.status).toBe(404);
    expectSchema("#/components/responses/404", raw404.json);
    expect(raw404.json.message).toMatch(/secret 'sec_[a-z0-9]+' not found/);
  });

  it("lists page by page with X-Next-Token, every secret once, in name order", async () => {
    const names = Array.from({ length: 7 }, (_, i) => `page-${String(i).padStart(2, "0")}`);
    for (const n of names) await Secret.create(n, `${VALUE_1}-${n}`);
    const pager = Secret.list({ limit: 3 });
    const pages: string[][] = [];
    while (pager.hasNext) pages.push((await pager.nextItems()).map((s) => s.name));
    expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
    expect(pages.flat()).toEqual(names);

    const first = await api("GET", "/secrets?limit=3");
    expect(first.status).toBe(200);
    expectSchema("#/paths/~1secrets/get/responses/200", first.json);
    const next = first.headers.get("x-next-token");
    expect(next).toBeTruthy();
    const second = await api("GET", `/secrets?limit=3&nextToken=${encodeURIComponent(next!)}`);
    expect(second.json.map((s: { name: string }) => s.name)).toEqual(names.slice(3, 6));
    const all = await api("GET", "/secrets");
    expect(all.headers.get("x-next-token")).toBeNull();
    expect(all.json).toHaveLength(7);
    for (const n of names) await Secret.destroy(n);
    expect((await api("GET", "/secrets")).json).toEqual([]);
  });

  it("bad input: 400 (names, values, metadata, limits, tokens, malformed JSON), 409 for a taken name, 413 past 1 MiB, 401 without a valid key, nothing left behind", async () => {
    const bad = async (method: string, path: string, body: string | undefined, status: number, message: RegExp) => {
      const r = await api(method, path, body);
      expect(r.status, `${method} ${path} ${body?.slice(0, 60)}`).toBe(status);
      // 413 and 405 are not among /secrets' responses in the spec: their body is still E2B's Error.
      expectSchema(status === 413 || status === 405 ? "#/components/schemas/Error" : `#/components/responses/${status}`, r.json);
      expect(r.json.code).toBe(status);
      expect(r.json.message).toMatch(message);
    };
    await bad("POST", "/secrets", JSON.stringify({ name: "has space", value: VALUE_1 }), 400, /invalid secret name 'has space'/);
    await bad("POST", "/secrets", JSON.stringify({ name: "sec_x", value: VALUE_1 }), 400, /reserved/);
    await bad("POST", "/secrets", JSON.stringify({ name: "n".repeat(129), value: VALUE_1 }), 400, /at most 128/);
    await bad("POST", "/secrets", JSON.stringify({ value: VALUE_1 }), 400, /needs a name/);
    await bad("POST", "/secrets", JSON.stringify({ name: "ok" }), 400, /'value' is required/);
    await bad("POST", "/secrets", JSON.stringify({ name: "ok", value: "v".repeat(64 * 1024 + 1) }), 400, /at most 65536 bytes/);
    await bad("POST", "/secrets", JSON.stringify({ name: "ok", value: VALUE_1, metadata: { k: 5 } }), 400, /metadata\.k' must be a string/);
    await bad("POST", "/secrets", `{"name": "ok", "value": "${VALUE_1}"`, 400, /invalid JSON body: send a JSON object/);
    await bad("POST", "/secrets", `{"name": "ok", "value": ${VALUE_1}}`, 400, /invalid JSON body/);
    await bad("POST", "/secrets", JSON.stringify({ name: "ok", value: "x".repeat(1024 * 1024) }), 413, /larger than/);
    await bad("GET", "/secrets?limit=0", undefined, 400, /invalid limit '0'/);
    await bad("GET", "/secrets?limit=101", undefined, 400, /invalid limit '101'/);
    await bad("GET", "/secrets?nextToken=%%%", undefined, 400, /invalid nextToken/);
    await bad("GET", "/secrets/sec_nope", undefined, 404, /secret 'sec_nope' not found/);
    await bad("POST", "/secrets/nope", JSON.stringify({ value: VALUE_1 }), 404, /secret 'nope' not found/);
    await bad("PUT", "/secrets", "{}", 405, /not allowed/);
    await expect(Secret.create("bad name!", VALUE_1)).rejects.toBeInstanceOf(SecretError);
    // Nothing was made by any of those.
    expect((await api("GET", "/secrets")).json).toEqual([]);

    await Secret.create("taken", VALUE_1);
    await bad("POST", "/secrets", JSON.stringify({ name: "TAKEN", value: VALUE_2 }), 409, /a secret named 'taken' exists/);
    await bad("POST", "/secrets/taken", JSON.stringify({ value: "" }), 400, /must not be empty/);
    expect((await Secret.getInfo("taken")).version).toBe(1);

    for (const key of ["", "e2b_" + "0".repeat(40)]) {
      const r = await api("GET", "/secrets", undefined, key);
      expect(r.status).toBe(401);
      expectSchema("#/components/responses/401", r.json);
    }
    await expect(Secret.list({ apiKey: "e2b_" + "1".repeat(40) }).nextItems()).rejects.toBeInstanceOf(AuthenticationError);
    await Secret.destroy("taken");
  });

  it("the value is in no answer, log line, event, audit entry or database page; the audit names secrets by name and version", async () => {
    const s = await Secret.create("audited", VALUE_1);
    await Secret.update("audited", VALUE_2);
    await Secret.destroy(s.secretId);
    // The request's audit entry is written as its answer goes out: read until the delete's is there.
    let audit: any[] = [];
    for (let i = 0; i < 100; i++) {
      const text = await (await fetch(`${cp.workspaceUrl}/audit?limit=10000`, { headers: { "x-api-key": cp.apiKey } })).text();
      audit = text.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
      if (audit.some((e) => e.action === "DELETE /secrets/:secretID" && e.details?.secret_id === s.secretId)) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const mine = audit.filter((e) => e.details?.secret_id === s.secretId);
    expect(mine.map((e) => [e.action, e.details.name, e.details.version])).toEqual([
      ["POST /secrets", "audited", 1],
      ["POST /secrets/:secretID", "audited", 2],
      ["DELETE /secrets/:secretID", "audited", 2],
    ]);
    const events = await (await fetch(`${cp.workspaceUrl}/events?limit=1000`, { headers: { "x-api-key": cp.apiKey } })).text();

    const haystacks: [string, string][] = [
      ["responses", bodies.join("\n")],
      ["the pino log", logLines.join("")],
      ["the audit log", JSON.stringify(audit)],
      ["the events", events],
    ];
    expect(logLines.some((l) => l.includes("secret created"))).toBe(true);
    for (const [where, text] of haystacks) {
      for (const v of [VALUE_1, VALUE_2]) expect(text.includes(v), `${v} in ${where}`).toBe(false);
    }
    // Every file of the data dir (the SQLite store with its journal, the activity database), byte for byte.
    const files = readdirSync(cp.dataDir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile() && /\.db|journal|wal/.test(e.name));
    expect(files.map((f) => f.name)).toContain("locale2b.db");
    for (const f of files) {
      const bytes = readFileSync(join(f.parentPath, f.name));
      for (const v of [VALUE_1, VALUE_2]) expect(bytes.includes(Buffer.from(v)), `${v} in ${f.name}`).toBe(false);
    }
    // The key file is beside the database, not in it, and only its owner may read it.
    const keyFile = join(cp.dataDir, "secrets.key");
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    const key = readFileSync(keyFile, "utf8").trim();
    expect(readFileSync(join(cp.dataDir, "locale2b.db")).includes(Buffer.from(key))).toBe(false);
  });
});

/** A command's exit code and output, whatever its exit code. */
async function run(sbx: Sandbox, cmd: string, user: "user" | "root"): Promise<{ code: number; out: string }> {
  try {
    const r = await sbx.commands.run(cmd, { user, timeoutMs: 120_000 });
    return { code: r.exitCode, out: r.stdout + r.stderr };
  } catch (err) {
    if (err instanceof CommandExitError) return { code: err.exitCode, out: err.stdout + err.stderr };
    throw err;
  }
}

describe.skipIf(!!noSandbox)("secrets: a sandbox cannot reach the key or the database (process runtime)", { timeout: 180_000 }, () => {
  it("as user and as root: the data dir, the key file and the database are not there, and no file inside holds the key", async () => {
    await Secret.create("escape-canary", VALUE_1);
    const key = readFileSync(join(cp.dataDir, "secrets.key"), "utf8").trim();
    const sbx = await Sandbox.create("base", { timeoutMs: 300_000 });
    try {
      const targets = [join(cp.dataDir, "secrets.key"), join(cp.dataDir, "locale2b.db"), cp.dataDir];
      for (const user of ["user", "root"] as const) {
        expect((await run(sbx, "id -u", user)).out.trim()).toBe(user === "root" ? "0" : "1000");
        for (const t of targets) {
          const r = await run(sbx, `cat '${t}' 2>&1; ls -la '${t}' 2>&1`, user);
          expect(r.out, `${user}: ${t}`).toMatch(/No such file or directory/);
          expect(r.out).not.toContain(key);
        }
        // Nowhere in the sandbox's view: by name, and by content (the key, a sealed database page).
        const found = await run(sbx, "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o \\( -name secrets.key -o -name 'locale2b.db*' \\) -print 2>/dev/null", user);
        expect(found.out.trim(), user).toBe("");
        const grep = await run(sbx, `grep -rlsF -- '${key}' /home /root /tmp /var /etc /run /mnt /opt /srv 2>/dev/null | head -5; true`, user);
        expect(grep.out.trim(), user).toBe("");
        // Nor through a process's environment or root: the sandbox has its own pid namespace.
        const procs = await run(sbx, "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep LOCALE2B_SECRETS; ls /proc/*/root" + cp.dataDir + " 2>&1 | head -3; true", user);
        expect(procs.out).not.toContain(key);
        expect(procs.out).not.toMatch(/secrets\.key|locale2b\.db/);
      }
    } finally {
      await sbx.kill();
      await Secret.destroy("escape-canary");
    }
  });

  it("with LOCALE2B_SECRETS_KEY: no key file is made, and the key is in no environment a sandbox sees, as user or root", async () => {
    const key = randomBytes(32).toString("base64");
    const restore = setEnv({ LOCALE2B_SECRETS_KEY: key });
    let other: TestControlPlane | undefined;
    try {
      other = await startTestControlPlane({ runtime, warmPool: 0 });
    } finally {
      restore();
    }
    const opts = { apiKey: other.apiKey, apiUrl: other.url, sandboxUrl: other.url };
    try {
      await Secret.create("env-key-canary", VALUE_1, opts);
      expect(existsSync(join(other.dataDir, "secrets.key"))).toBe(false);
      const sbx = await Sandbox.create("base", { ...opts, timeoutMs: 300_000 });
      try {
        for (const user of ["user", "root"] as const) {
          const r = await run(sbx, "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; true", user);
          expect(r.out, user).toContain("PATH=");
          expect(r.out, user).not.toContain(key);
          expect(r.out, user).not.toContain("LOCALE2B_SECRETS_KEY");
        }
      } finally {
        await sbx.kill();
      }
    } finally {
      await other.close();
    }
  });
});
