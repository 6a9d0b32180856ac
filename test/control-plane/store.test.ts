// The store contract, run against both stores: SQLite (one box) and a real
// Postgres (a fleet), started by the test from Debian's server binaries.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import sqlite from "node-sqlite3-wasm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pino from "pino";
import type { SandboxRecord, SandboxState } from "../../control-plane/domain/sandbox.js";
import type { SnapshotRecord } from "../../control-plane/domain/snapshot.js";
import type { TemplateBuildRecord, TemplateRecord } from "../../control-plane/domain/template.js";
import { SandboxTable } from "../../control-plane/manager/sandbox-table.js";
import { PgStore } from "../../control-plane/store/pg-store.js";
import { SqliteStore } from "../../control-plane/store/sqlite-store.js";
import type { Store } from "../../control-plane/store/store.js";
import { postgresMissing, startPostgres, type TestPostgres } from "../helpers/postgres.js";

const missing = postgresMissing();
if (missing) console.warn(`store.test.ts: skipping the Postgres store: ${missing}`);

function sandbox(id: string, over: Partial<SandboxRecord> = {}): SandboxRecord {
  return {
    id,
    templateId: "base",
    state: "running",
    metadata: {},
    envVars: { SECRET: "not-in-a-column" },
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 1024,
    startedAt: 1_000,
    endAt: 2_000,
    onTimeout: "kill",
    autoResume: false,
    envdVersion: "0.5.0",
    envdAccessToken: `envd-${id}`,
    trafficAccessToken: `traffic-${id}`,
    allowInternetAccess: true,
    runtime: "process",
    runtimeData: { pid: 42, nested: { a: [1, 2] } },
    ...over,
  };
}

function snapshot(id: string, tag: string, over: Partial<SnapshotRecord> = {}): SnapshotRecord {
  return { id, tag, sandboxId: "sb1", templateId: "base", runtime: "process", kind: "filesystem", build: `b-${id}-${tag}`, createdAt: 1, sizeBytes: 10, cpuCount: 1, memoryMB: 256, diskSizeMB: 1024, ...over };
}

function template(id: string, names: string[], createdAt = 1): TemplateRecord {
  return { id, names, public: false, cpuCount: 2, memoryMB: 512, diskSizeMB: 1024, createdAt, updatedAt: createdAt, spawnCount: 0, buildCount: 1 };
}

function build(id: string, templateId: string, createdAt: number): TemplateBuildRecord {
  return { id, templateId, status: "waiting", cpuCount: 2, memoryMB: 512, diskSizeMB: 1024, tags: ["default"], envdVersion: "0.5.0", createdAt, updatedAt: createdAt };
}

type Opener = () => Promise<Store>;

const kinds: { name: string; skip: boolean; open?: Opener }[] = [
  { name: "sqlite", skip: false },
  { name: "postgres", skip: missing !== undefined },
];

let server: TestPostgres | undefined;
const dirs: string[] = [];

beforeAll(async () => {
  if (!missing) server = await startPostgres();
});

afterAll(async () => {
  await server?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A new, empty store of `kind` (its own file or database). */
async function fresh(kind: string): Promise<Store> {
  if (kind === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "locale2b-store-"));
    dirs.push(dir);
    return new SqliteStore(join(dir, "locale2b.db"));
  }
  return PgStore.open(await server!.database());
}

for (const kind of kinds) {
  describe.skipIf(kind.skip)(`the store contract: ${kind.name}`, () => {
    let store: Store;
    beforeAll(async () => {
      store = await fresh(kind.name);
    });
    afterAll(async () => {
      await store?.close();
    });

    it("keeps a sandbox record as it was put, and replaces it on the next put", async () => {
      const rec = sandbox("a1", { metadata: { team: "x", "odd key": "ü ✓" }, network: { allowOut: ["10.0.0.0/8"] } });
      await store.putSandbox(rec);
      expect(await store.getSandbox("a1")).toEqual(rec);
      await store.putSandbox({ ...rec, state: "paused", metadata: { team: "y" } });
      expect(await store.getSandbox("a1")).toMatchObject({ state: "paused", metadata: { team: "y" } });
      expect(await store.listSandboxes({ metadata: { team: "x" } })).toEqual([]);
      expect((await store.listSandboxes({ metadata: { team: "y" } })).map((r) => r.id)).toEqual(["a1"]);
      expect(await store.getSandbox("nope")).toBeUndefined();
      await store.deleteSandbox("a1");
      expect(await store.getSandbox("a1")).toBeUndefined();
    });

    it("lists sandboxes by state, template, start, metadata and node, started first then by id", async () => {
      const recs = [
        sandbox("c", { startedAt: 5, templateId: "t1", metadata: { env: "prod", team: "a" }, node: "n1" }),
        sandbox("b", { startedAt: 5, templateId: "t2", metadata: { env: "prod" }, node: "n2" }),
        sandbox("a", { startedAt: 9, templateId: "t1", state: "paused" }),
        sandbox("d", { startedAt: 1, state: "killed", endReason: "killed" }),
      ];
      for (const r of recs) await store.putSandbox(r);
      const ids = async (f: Parameters<Store["listSandboxes"]>[0]) => (await store.listSandboxes(f)).map((r) => r.id);
      expect(await ids({})).toEqual(["b", "c", "a"]); // killed ones only when asked for
      expect(await ids({ states: ["killed"] })).toEqual(["d"]);
      expect(await ids({ states: ["running", "killed"] as SandboxState[] })).toEqual(["d", "b", "c"]);
      expect(await ids({ templateId: "t1" })).toEqual(["c", "a"]);
      expect(await ids({ startedAfter: 6 })).toEqual(["a"]);
      expect(await ids({ metadata: { env: "prod" } })).toEqual(["b", "c"]);
      expect(await ids({ metadata: { env: "prod", team: "a" } })).toEqual(["c"]);
      expect(await ids({ node: "n2" })).toEqual(["b"]);
      // A fleet's placement counts each node's live sandboxes, their memory and their vCPUs from here.
      await store.putSandbox(sandbox("e", { startedAt: 2, node: "n1", memoryMB: 1024, cpuCount: 4 }));
      await store.putSandbox(sandbox("f", { startedAt: 3, node: "n1", state: "killed", endReason: "killed" }));
      const loads = (await store.nodeLoads()).sort((x, y) => (x.node < y.node ? -1 : 1));
      expect(loads).toEqual([
        { node: "n1", sandboxes: 2, memoryMB: recs[0]!.memoryMB + 1024, cpus: recs[0]!.cpuCount + 4 },
        { node: "n2", sandboxes: 1, memoryMB: recs[1]!.memoryMB, cpus: recs[1]!.cpuCount },
      ]);
      for (const r of [...recs, { id: "e" }, { id: "f" }]) await store.deleteSandbox(r.id);
    });

    it("makes API keys of E2B's form, verifies them by hash, and revokes by id or by key", async () => {
      const { key, info } = await store.createApiKey("ci");
      expect(key).toMatch(/^e2b_[0-9a-f]{40}$/);
      expect(info).toMatchObject({ name: "ci", mask: `${key.slice(0, 8)}…${key.slice(-4)}` });
      expect(await store.verifyApiKey(key)).toMatchObject({ id: info.id, name: "ci" });
      expect((await store.listApiKeys()).find((k) => k.id === info.id)?.lastUsedAt).toBeGreaterThan(0);
      expect(await store.verifyApiKey(`${key}x`)).toBeUndefined();
      expect(await store.verifyApiKey("")).toBeUndefined();
      // Imports are idempotent: the same key twice is one key.
      const imported = await store.importApiKey("e2b_imported", "env");
      expect(await store.importApiKey("e2b_imported", "again")).toEqual(imported);
      expect((await store.listApiKeys()).map((k) => k.id).sort()).toEqual([info.id, imported.id].sort());
      expect(await store.revokeApiKey(info.id)).toBe(true);
      expect(await store.verifyApiKey(key)).toBeUndefined();
      expect(await store.revokeApiKey("e2b_imported")).toBe(true);
      expect(await store.revokeApiKey("e2b_imported")).toBe(false);
      expect(await store.listApiKeys()).toEqual([]);
    });

    it("keeps snapshots by id and tag, newest first, and says whether a delete found one", async () => {
      await store.putSnapshot(snapshot("s1", "default", { createdAt: 1, name: "first" }));
      await store.putSnapshot(snapshot("s2", "default", { createdAt: 3, sandboxId: "sb2" }));
      await store.putSnapshot(snapshot("s1", "v2", { createdAt: 2, name: "first" }));
      expect((await store.listSnapshots()).map((s) => `${s.id}:${s.tag}`)).toEqual(["s2:default", "s1:v2", "s1:default"]);
      expect((await store.listSnapshots({ sandboxId: "sb2" })).map((s) => s.id)).toEqual(["s2"]);
      await store.putSnapshot(snapshot("s1", "v2", { createdAt: 4, name: "first", build: "rebuilt" }));
      expect(await store.getSnapshot("s1", "v2")).toMatchObject({ build: "rebuilt", createdAt: 4 });
      expect(await store.deleteSnapshot("s1", "v2")).toBe(true);
      expect(await store.deleteSnapshot("s1", "v2")).toBe(false);
      expect(await store.getSnapshot("s1", "v2")).toBeUndefined();
    });

    it("keeps templates with their names, builds and tags; deleting one takes them all", async () => {
      await store.putTemplate(template("tpl1", ["alpha", "alpha-2"], 1));
      await store.putTemplate(template("tpl2", [], 2));
      expect((await store.templateByName("alpha-2"))?.id).toBe("tpl1");
      await store.putTemplate({ ...template("tpl1", ["beta"], 1), spawnCount: 3 });
      expect(await store.templateByName("alpha")).toBeUndefined();
      expect(await store.templateByName("beta")).toMatchObject({ id: "tpl1", spawnCount: 3 });
      expect((await store.listTemplates()).map((t) => t.id)).toEqual(["tpl1", "tpl2"]);

      await store.putTemplateBuild(build("b1", "tpl1", 10));
      await store.putTemplateBuild(build("b2", "tpl1", 20));
      await store.putTemplateBuild(build("b3", "tpl2", 15));
      await store.putTemplateBuild({ ...build("b1", "tpl1", 10), status: "ready" });
      expect((await store.listTemplateBuilds("tpl1")).map((b) => b.id)).toEqual(["b2", "b1"]);
      expect((await store.listTemplateBuilds()).map((b) => b.id)).toEqual(["b2", "b3", "b1"]);
      expect((await store.getTemplateBuild("b1"))?.status).toBe("ready");

      await store.putTemplateTag({ templateId: "tpl1", tag: "default", buildId: "b1", createdAt: 1 });
      await store.putTemplateTag({ templateId: "tpl1", tag: "v1", buildId: "b1", createdAt: 2 });
      await store.putTemplateTag({ templateId: "tpl1", tag: "default", buildId: "b2", createdAt: 3 });
      expect((await store.getTemplateTag("tpl1", "default"))?.buildId).toBe("b2");
      expect((await store.listTemplateTags("tpl1")).map((t) => t.tag)).toEqual(["v1", "default"]);
      expect(await store.deleteTemplateTag("tpl1", "v1")).toBe(true);
      expect(await store.deleteTemplateTag("tpl1", "v1")).toBe(false);

      await store.deleteTemplateBuild("b3");
      expect(await store.getTemplateBuild("b3")).toBeUndefined();
      expect(await store.deleteTemplate("tpl1")).toBe(true);
      expect(await store.deleteTemplate("tpl1")).toBe(false);
      expect(await store.templateByName("beta")).toBeUndefined();
      expect(await store.listTemplateBuilds("tpl1")).toEqual([]);
      expect(await store.listTemplateTags("tpl1")).toEqual([]);
    });

    it("keeps settings; initSetting keeps the first value", async () => {
      expect(await store.getSetting("k")).toBeUndefined();
      await store.setSetting("k", "1");
      await store.setSetting("k", "2");
      expect(await store.getSetting("k")).toBe("2");
      expect(await store.initSetting("seed", "first")).toBe("first");
      expect(await store.initSetting("seed", "second")).toBe("first");
    });

    it("keeps a fleet's nodes by name, each as its last heartbeat wrote it", async () => {
      const node = (name: string, heartbeatAt: number) => ({
        name,
        url: `http://${name}:3000`,
        state: "ready" as const,
        heartbeatAt,
        startedAt: 1,
        runtime: "process",
        capacity: { maxSandboxes: 10, memoryBudgetMB: 4096, sandboxes: 0, memoryMB: 0 },
        images: ["base"],
      });
      await store.putNode(node("n2", 5));
      await store.putNode(node("n1", 5));
      expect(await store.setNodeState("n2", "cordoned")).toBe(true);
      expect(await store.setNodeState("nope", "cordoned")).toBe(false);
      // A heartbeat after the cordon keeps it.
      await store.putNode(node("n2", 9));
      expect((await store.listNodes()).map((n) => [n.name, n.state, n.heartbeatAt])).toEqual([
        ["n1", "ready", 5],
        ["n2", "cordoned", 9],
      ]);
      expect((await store.getNode("n1"))?.url).toBe("http://n1:3000");
      expect(await store.deleteNode("n1")).toBe(true);
      expect(await store.deleteNode("n1")).toBe(false);
      expect(await store.getNode("n1")).toBeUndefined();
    });

    it("keeps volumes by id, one per name, oldest first", async () => {
      const vol = (id: string, name: string, createdAt: number) => ({ id, name, sizeMB: 512, createdAt });
      expect(await store.addVolume(vol("vol_b", "data", 2))).toBe(true);
      expect(await store.addVolume(vol("vol_a", "cache-1", 2))).toBe(true);
      // A name is one volume's: the second is refused, the first kept.
      expect(await store.addVolume(vol("vol_c", "data", 3))).toBe(false);
      expect(await store.getVolume("vol_c")).toBeUndefined();
      expect(await store.getVolume("vol_b")).toEqual(vol("vol_b", "data", 2));
      expect((await store.volumeByName("cache-1"))?.id).toBe("vol_a");
      expect(await store.volumeByName("nope")).toBeUndefined();
      expect((await store.listVolumes()).map((v) => v.id)).toEqual(["vol_a", "vol_b"]);
      expect(await store.deleteVolume("vol_b")).toBe(true);
      expect(await store.deleteVolume("vol_b")).toBe(false);
      // Its name is free again.
      expect(await store.addVolume(vol("vol_d", "data", 4))).toBe(true);
      expect((await store.listVolumes()).map((v) => v.name)).toEqual(["cache-1", "data"]);
    });

    it("keeps secrets per team, one per name, in versions; a delete takes every version", async () => {
      const sec = (id: string, name: string, team = "local") => ({ id, team, name, currentVersion: 1, metadata: { env: "prod" }, createdAt: 5, updatedAt: 5 });
      const first = (id: string) => ({ secretId: id, version: 1, sealed: `sealed-${id}-1`, createdAt: 5 });
      expect(await store.addSecret(sec("sec_b", "openai"), first("sec_b"))).toBe(true);
      expect(await store.addSecret(sec("sec_a", "github"), first("sec_a"))).toBe(true);
      // The name is taken in this team (nothing written), free in another.
      expect(await store.addSecret(sec("sec_c", "openai"), first("sec_c"))).toBe(false);
      expect(await store.getSecret("local", "sec_c")).toBeUndefined();
      expect(await store.addSecret(sec("sec_o", "openai", "other"), first("sec_o"))).toBe(true);
      expect(await store.getSecret("local", "openai")).toEqual(sec("sec_b", "openai"));
      expect((await store.getSecret("local", "sec_a"))?.name).toBe("github");
      expect(await store.getSecret("other", "sec_a")).toBeUndefined();
      // Paged by name.
      expect((await store.listSecrets("local", { limit: 1 })).map((s) => s.name)).toEqual(["github"]);
      expect((await store.listSecrets("local", { limit: 5, after: "github" })).map((s) => s.name)).toEqual(["openai"]);
      expect((await store.listSecrets("other", { limit: 5 })).map((s) => s.id)).toEqual(["sec_o"]);
      // Concurrent updates each get their own number; the seal is asked for the number it gets.
      const asked: number[] = [];
      const bumps = await Promise.all([1, 2, 3].map((i) => store.addSecretVersion("local", "sec_b", (v) => (asked.push(v), `sealed-b-${v}-${i}`), i === 3 ? { env: "dev" } : undefined, 10 + i)));
      expect(bumps.map((b) => b!.currentVersion).sort()).toEqual([2, 3, 4]);
      expect(asked.sort()).toEqual([2, 3, 4]);
      const cur = await store.currentSecret("local", "openai");
      expect(cur?.record.currentVersion).toBe(4);
      expect(cur?.version).toMatchObject({ secretId: "sec_b", version: 4 });
      expect(cur?.version.sealed).toMatch(/^sealed-b-4-/);
      // Only the update that gave metadata replaced it.
      expect(cur?.record.metadata).toEqual({ env: "dev" });
      expect(await store.addSecretVersion("other", "sec_b", () => "x", undefined, 20)).toBeUndefined();
      expect(await store.currentSecret("local", "nope")).toBeUndefined();
      expect(await store.deleteSecret("other", "sec_b")).toBe(false);
      expect(await store.deleteSecret("local", "sec_b")).toBe(true);
      expect(await store.deleteSecret("local", "sec_b")).toBe(false);
      expect(await store.currentSecret("local", "openai")).toBeUndefined();
      // Its name is free again, and starts at version 1.
      expect(await store.addSecret(sec("sec_d", "openai"), first("sec_d"))).toBe(true);
      expect((await store.currentSecret("local", "openai"))?.version).toMatchObject({ secretId: "sec_d", version: 1, sealed: "sealed-sec_d-1" });
    });

    it("records its schema versions, and opening again applies none twice", async () => {
      // Postgres has one more: the activity history (one box keeps it in activity.db).
      expect(await store.schemaVersions()).toEqual(kind.name === "postgres" ? [1, 2, 3, 4, 5, 6] : [1, 2, 3, 4, 5]);
    });
  });
}

describe("schema versions", () => {
  it("sqlite: a data dir from before versions were kept gets the new columns and keeps its records", async () => {
    const dir = mkdtempSync(join(tmpdir(), "locale2b-store-"));
    dirs.push(dir);
    const path = join(dir, "locale2b.db");
    // The schema as it was (no schema_migrations, no node column), with a record in it.
    const old = new sqlite.Database(path);
    old.exec("CREATE TABLE sandboxes (id TEXT PRIMARY KEY, state TEXT NOT NULL, template_id TEXT NOT NULL, started_at INTEGER NOT NULL, end_at INTEGER NOT NULL, record TEXT NOT NULL)");
    old.run("INSERT INTO sandboxes VALUES (?, ?, ?, ?, ?, ?)", ["old1", "running", "base", 1, 2, JSON.stringify(sandbox("old1"))]);
    old.close();
    const store = new SqliteStore(path);
    expect(await store.schemaVersions()).toEqual([1, 2, 3, 4, 5]);
    expect(await store.getSandbox("old1")).toEqual(sandbox("old1"));
    await store.putSandbox(sandbox("new1", { node: "n1" }));
    expect((await store.listSandboxes({ node: "n1" })).map((r) => r.id)).toEqual(["new1"]);
    await store.close();
  });

  it("sqlite: a database newer than this code is refused with what to do", async () => {
    const dir = mkdtempSync(join(tmpdir(), "locale2b-store-"));
    dirs.push(dir);
    const path = join(dir, "locale2b.db");
    await new SqliteStore(path).close();
    const db = new sqlite.Database(path);
    db.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'from the future', 0)");
    db.close();
    expect(() => new SqliteStore(path)).toThrow(/schema version 99, newer than this locale2b knows \(5\): run the newer locale2b/);
  });

  it.skipIf(missing !== undefined)("postgres: replicas starting together migrate once; a newer database is refused", async () => {
    const url = await server!.database();
    const stores = await Promise.all([1, 2, 3, 4].map(() => PgStore.open(url, { max: 2 })));
    for (const s of stores) expect(await s.schemaVersions()).toEqual([1, 2, 3, 4, 5, 6]);
    // One token seed for every replica, whichever wrote first.
    const seeds = await Promise.all(stores.map((s, i) => s.initSetting("token_seed", `seed-${i}`)));
    expect(new Set(seeds).size).toBe(1);
    await Promise.all(stores.map((s) => s.close()));
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'from the future', 0)");
    await c.end();
    await expect(PgStore.open(url)).rejects.toThrow(/schema version 99, newer than this locale2b knows \(6\)/);
  });

  it.skipIf(missing !== undefined)("postgres: a server that cannot be reached is a clear error, with no password in it", async () => {
    await expect(PgStore.open("postgresql://locale2b:hunter2@127.0.0.1:1/none")).rejects.toThrow(/cannot use the Postgres database at postgresql:\/\/locale2b:\*\*\*@127\.0\.0\.1:1\/none: .*ECONNREFUSED/);
  });
});

describe("the manager's sandbox table", () => {
  const log = pino({ level: "silent" });

  /** A store whose sandbox writes wait until let go, or fail: to see the table's order and its acknowledgement. */
  function slowStore(base: Store) {
    const writes: string[] = [];
    let release: () => void = () => undefined;
    let gate = new Promise<void>((r) => (release = r));
    let failNext = false;
    const store = Object.create(base) as Store;
    store.putSandbox = async (rec) => {
      await gate;
      writes.push(`${rec.id}:${rec.state}`);
      if (failNext) {
        failNext = false;
        throw new Error("disk full");
      }
      await base.putSandbox(rec);
    };
    store.deleteSandbox = async (id) => {
      await gate;
      writes.push(`${id}:deleted`);
      await base.deleteSandbox(id);
    };
    return {
      store,
      writes,
      open: () => release(),
      close: () => (gate = new Promise<void>((r) => (release = r))),
      failNext: () => (failNext = true),
    };
  }

  it("answers from memory at once, writes in order, and acknowledges only once the store has it", async () => {
    const base = await fresh("sqlite");
    const s = slowStore(base);
    const table = new SandboxTable(s.store, log, "node-a");
    table.put(sandbox("x", { state: "creating" }));
    table.put(sandbox("x", { state: "running" }));
    table.put(sandbox("y"));
    table.delete("y");
    expect(table.get("x")?.state).toBe("running");
    expect(table.get("x")?.node).toBe("node-a");
    expect(table.get("y")).toBeUndefined();
    let acked = false;
    const flushed = table.flushed().then(() => (acked = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(acked).toBe(false);
    expect(await base.getSandbox("x")).toBeUndefined();
    s.open();
    await flushed;
    expect(s.writes).toEqual(["x:creating", "x:running", "y:running", "y:deleted"]);
    expect((await base.getSandbox("x"))?.node).toBe("node-a");

    // A killed sandbox leaves memory; the store keeps its record.
    table.put({ ...table.get("x")!, state: "killed" });
    await table.flushed();
    expect(table.get("x")).toBeUndefined();
    expect(table.recent("x")?.state).toBe("killed");
    expect((await base.getSandbox("x"))?.state).toBe("killed");

    // A failed write: the acknowledgement fails with why; later writes still go.
    s.failNext();
    table.put(sandbox("z"));
    await expect(table.flushed()).rejects.toThrow(/the sandbox store could not be written: disk full/);
    table.put(sandbox("z", { state: "paused" }));
    await table.flushed();
    expect((await base.getSandbox("z"))?.state).toBe("paused");

    // Another node's records are not loaded.
    await base.putSandbox(sandbox("other", { node: "node-b" }));
    const again = new SandboxTable(base, log, "node-a");
    expect((await again.load()).map((r) => r.id)).toEqual(["z"]);
    await base.close();
  });
});
