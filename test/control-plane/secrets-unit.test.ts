// Secrets below the API: the AES-256-GCM seal, the key (env value or a 0600
// file made at first use), the service's key check, and the placeholder
// resolver the egress proxy will call, on a real SQLite store and a real
// audit log.
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { AuditLog } from "../../control-plane/audit/audit-log.js";
import { Redactor } from "../../control-plane/audit/redact.js";
import { ControlPlaneError } from "../../control-plane/domain/errors.js";
import { TEAM } from "../../control-plane/domain/secret.js";
import { open, seal } from "../../control-plane/secrets/cipher.js";
import { resolveSecretPlaceholders } from "../../control-plane/secrets/placeholders.js";
import { keySource, loadKey, parseKey } from "../../control-plane/secrets/secret-key.js";
import { SecretService } from "../../control-plane/secrets/secret-service.js";
import { ActivityDb } from "../../control-plane/store/activity-db.js";
import { SqliteActivityHistory } from "../../control-plane/store/sqlite-activity-history.js";
import { SqliteStore } from "../../control-plane/store/sqlite-store.js";

const log = pino({ level: "silent" });
const dirs: string[] = [];
const closers: (() => Promise<void> | void)[] = [];

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "locale2b-secrets-"));
  dirs.push(d);
  return d;
}

afterEach(async () => {
  for (const c of closers.splice(0)) await c();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function service(dir = tempDir(), keyFile = join(dir, "secrets.key")): { secrets: SecretService; store: SqliteStore; dir: string; keyFile: string } {
  const store = new SqliteStore(join(dir, "locale2b.db"));
  closers.push(() => store.close());
  return { secrets: new SecretService({ store, key: { file: keyFile }, log }), store, dir, keyFile };
}

async function failure(p: Promise<unknown>): Promise<ControlPlaneError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ControlPlaneError);
  return err as ControlPlaneError;
}

describe("the secrets cipher and key", () => {
  it("seals with a fresh nonce; opens only with the same key, secret and version", () => {
    const key = Buffer.alloc(32, 7);
    const a = seal(key, "sec_a", 1, "hunter2-value");
    const b = seal(key, "sec_a", 1, "hunter2-value");
    expect(a).not.toBe(b);
    expect(Buffer.from(a, "base64").toString("latin1")).not.toContain("hunter2");
    expect(open(key, "sec_a", 1, a)).toBe("hunter2-value");
    expect(() => open(key, "sec_b", 1, a)).toThrow();
    expect(() => open(key, "sec_a", 2, a)).toThrow();
    expect(() => open(Buffer.alloc(32, 8), "sec_a", 1, a)).toThrow();
    const flipped = Buffer.from(a, "base64");
    flipped[14]! ^= 1;
    expect(() => open(key, "sec_a", 1, flipped.toString("base64"))).toThrow();
  });

  it("takes a key as 64 hex digits or base64 of 32 bytes, and says how to make one otherwise", () => {
    expect(parseKey("ab".repeat(32), "k")).toEqual(Buffer.alloc(32, 0xab));
    expect(parseKey(Buffer.alloc(32, 1).toString("base64"), "k")).toEqual(Buffer.alloc(32, 1));
    expect(() => parseKey("short", "LOCALE2B_SECRETS_KEY")).toThrow(/LOCALE2B_SECRETS_KEY is not a secrets key.*openssl rand -base64 32/);
  });

  it("creates the key file with mode 0600 at first use, reads it after, and refuses one others may read", () => {
    const file = join(tempDir(), "sub", "secrets.key");
    const first = loadKey({ file });
    expect(first.created).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const again = loadKey({ file });
    expect(again.created).toBe(false);
    expect(again.key).toEqual(first.key);
    chmodSync(file, 0o644);
    expect(() => loadKey({ file })).toThrow(/may be read by others \(mode 644\): chmod 600 it/);
  });
});

describe("the secret service", () => {
  it("keeps only sealed values: the database file never holds a value, the key file is not in it", async () => {
    const { secrets, store, dir, keyFile } = service();
    const value = "plaintext-canary-7f3a9c";
    const s = await secrets.create(TEAM, "Canary", value, { team: "infra" });
    expect(s).toMatchObject({ name: "canary", currentVersion: 1, metadata: { team: "infra" } });
    await secrets.update(TEAM, "canary", `${value}-v2`, undefined);
    await store.close();
    const db = readFileSync(join(dir, "locale2b.db"));
    expect(db.includes(Buffer.from(value))).toBe(false);
    const keyText = readFileSync(keyFile, "utf8").trim();
    expect(db.includes(Buffer.from(keyText))).toBe(false);
    expect(db.includes(Buffer.from(keyText, "base64"))).toBe(false);
  });

  it("refuses (503) a key that is not the one the store's secrets were sealed with, and says what to do", async () => {
    const dir = tempDir();
    const a = service(dir);
    await a.secrets.create(TEAM, "one", "value-one", undefined);
    await a.store.close();
    closers.pop();
    // The key file was lost: a new one is made, and refused.
    rmSync(a.keyFile);
    const b = service(dir);
    const err = await failure(b.secrets.create(TEAM, "two", "value-two", undefined));
    expect(err.kind).toBe("unavailable");
    expect(err.message).toMatch(/not the one the stored secrets were sealed with.*LOCALE2B_SECRETS_KEY.*cannot be read/);
    expect(await b.store.getSecret(TEAM, "two")).toBeUndefined();
  });

  it("on a shared store without LOCALE2B_SECRETS_KEY: 503 saying to set it, no key file made", async () => {
    const dir = tempDir();
    const store = new SqliteStore(join(dir, "locale2b.db"));
    closers.push(() => store.close());
    const secrets = new SecretService({ store, key: keySource(undefined, {}), log });
    const err = await failure(secrets.create(TEAM, "one", "value-one", undefined));
    expect(err.kind).toBe("unavailable");
    expect(err.message).toMatch(/set LOCALE2B_SECRETS_KEY .*openssl rand -base64 32.*same key/);
    expect(await store.getSecret(TEAM, "one")).toBeUndefined();
    expect(keySource(dir, {})).toEqual({ file: join(dir, "secrets.key") });
    expect(keySource(undefined, { file: "/k" })).toEqual({ file: "/k" });
    expect(keySource(dir, { key: "x", file: "/k" })).toEqual({ value: "x" });
  });

  it("validates names, values and metadata without quoting the value", async () => {
    const { secrets } = service();
    for (const [name, value, metadata, message] of [
      ["has space", "v", undefined, /invalid secret name/],
      ["sec_reserved", "v", undefined, /reserved for secret ids/],
      ["x".repeat(129), "v", undefined, /at most 128/],
      ["ok", "", undefined, /must not be empty/],
      ["ok", 12345678, undefined, /must be a string, got number/],
      ["ok", "y".repeat(64 * 1024 + 1), undefined, /at most 65536 bytes/],
      ["ok", "v", { a: 1 }, /metadata\.a' must be a string/],
      ["ok", "v", Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, "v"])), /at most 32/],
    ] as const) {
      const err = await failure(secrets.create(TEAM, name, value, metadata));
      expect(err.kind, String(name)).toBe("invalid");
      expect(err.message).toMatch(message);
      expect(err.message).not.toContain("12345678");
    }
    await secrets.create(TEAM, "dup", "v1", undefined);
    expect((await failure(secrets.create(TEAM, "DUP", "v2", undefined))).kind).toBe("conflict");
  });
});

describe("placeholders (for the egress proxy)", () => {
  it("resolves ${e2b.secrets.<name>} to the current version, audits the use by name and version, never the value", async () => {
    const { secrets, dir } = service();
    const db = new ActivityDb(join(dir, "activity.db"), log);
    closers.push(() => db.close());
    const audit = new AuditLog(new SqliteActivityHistory(db), new Redactor(), 60_000);
    const s = await secrets.create(TEAM, "openai-key", "sk-first-value", undefined);
    await secrets.create(TEAM, "org", "org-123", undefined);
    expect((await resolveSecretPlaceholders(secrets, TEAM, "Bearer ${e2b.secrets.openai-key}")).value).toBe("Bearer sk-first-value");
    await secrets.update(TEAM, s.id, "sk-second-value", undefined);
    const r = await resolveSecretPlaceholders(secrets, TEAM, "Bearer ${e2b.secrets.openai-key}; org=${e2b.secrets.org}; again=${e2b.secrets.openai-key}", { log: audit, actor: "egress", sandboxId: "isbx1" });
    expect(r.value).toBe("Bearer sk-second-value; org=org-123; again=sk-second-value");
    expect(r.used).toEqual([
      { secretId: s.id, name: "openai-key", version: 2 },
      expect.objectContaining({ name: "org", version: 1 }),
    ]);
    db.flush();
    const entries = await audit.query({ limit: 10 });
    expect(entries.map((e) => [e.action, e.details?.name, e.details?.version])).toEqual(expect.arrayContaining([
      ["secret.used", "openai-key", 2],
      ["secret.used", "org", 1],
    ]));
    expect(JSON.stringify(entries)).not.toMatch(/sk-second-value|org-123/);
    // No placeholder: the value as it is, nothing read.
    expect(await resolveSecretPlaceholders(secrets, TEAM, "plain")).toEqual({ value: "plain", used: [] });
  });

  it("an unknown name or a malformed placeholder is an error naming it, never passed through", async () => {
    const { secrets } = service();
    await secrets.create(TEAM, "known", "v-known", undefined);
    await secrets.create(TEAM, "multiline", "a\r\nX-Injected: 1", undefined);
    const unknown = await failure(resolveSecretPlaceholders(secrets, TEAM, "x ${e2b.secrets.known} ${e2b.secrets.nope}"));
    expect(unknown.kind).toBe("not_found");
    expect(unknown.message).toMatch(/secret 'nope', which does not exist/);
    expect(unknown.message).not.toContain("v-known");
    for (const bad of ["${e2b.secrets.known", "${e2b.secrets.}", "${e2b.secrets.a{b}"]) {
      expect((await failure(resolveSecretPlaceholders(secrets, TEAM, bad))).kind, bad).toBe("invalid");
    }
    const injected = await failure(resolveSecretPlaceholders(secrets, TEAM, "${e2b.secrets.multiline}"));
    expect(injected.message).toMatch(/line break or NUL, which a header cannot carry/);
    // Another team's secret is not found.
    expect((await failure(resolveSecretPlaceholders(secrets, "other-team", "${e2b.secrets.known}"))).kind).toBe("not_found");
  });
});

