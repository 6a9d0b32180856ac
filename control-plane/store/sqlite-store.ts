import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import sqlite from "node-sqlite3-wasm";
import { LIVE_STATES, type ListFilter, type SandboxRecord } from "../domain/sandbox.js";
import type { SnapshotFilter, SnapshotRecord } from "../domain/snapshot.js";
import type { TemplateBuildRecord, TemplateRecord, TemplateTagRecord } from "../domain/template.js";
import { pidAlive } from "../host/pids.js";
import { hashKey, LAST_USED_GRANULARITY_MS, maskKey, newApiKey, newKeyId, pendingMigrations, sealedOf, secretOf } from "./store-common.js";
import type { ApiKeyInfo, Store } from "./store.js";
import type { NodeRecord } from "../domain/node.js";
import type { VolumeRecord } from "../domain/volume.js";
import type { SealedVersion, SecretRecord } from "../domain/secret.js";
import { nodeOf } from "./store-common.js";
import { SQLITE_MIGRATIONS } from "./sqlite-migrations.js";



/**
 * The pid of the live process (a serving control plane, a restore) that owns
 * the store at `path` (its `<db>.owner` file), else undefined.
 */
export function liveOwner(path: string): number | undefined {
  let pid = 0;
  try {
    pid = Number(readFileSync(`${path}.owner`, "utf8").trim());
  } catch {
    return undefined; // never served
  }
  return pid && pid !== process.pid && pidAlive(pid) ? pid : undefined;
}

/** Records this process as the store's owner; refuses when another live one is (see liveOwner). */
export function claimOwnership(path: string): void {
  const previous = liveOwner(path);
  if (previous) {
    throw new Error(`the data directory ${dirname(path)} is in use by another locale2b server (pid ${previous}): stop it or use another --data-dir`);
  }
  rmSync(`${path}.lock`, { recursive: true, force: true });
  writeFileSync(`${path}.owner`, `${process.pid}\n`);
}

/** The control plane's state in one SQLite file (WebAssembly SQLite: no native build). */
export class SqliteStore implements Store {
  private readonly db: InstanceType<typeof sqlite.Database>;

  /**
   * @param owner the serving control plane: it records its pid and clears a
   *   lock left behind by an earlier owner that died (WebAssembly SQLite
   *   locks with a `<db>.lock` directory, which a SIGKILL can leave behind).
   */
  constructor(
    readonly path: string,
    opts: { owner?: boolean } = {},
  ) {
    mkdirSync(dirname(path), { recursive: true });
    if (opts.owner) claimOwnership(path);
    this.db = new sqlite.Database(path);
    this.db.exec("PRAGMA busy_timeout = 5000");
    this.db.exec("PRAGMA foreign_keys = ON");
    this.db.exec("PRAGMA synchronous = FULL");
    this.migrate();
  }

  private migrate(): void {
    this.db.exec("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)");
    const applied = new Set((this.db.all("SELECT version FROM schema_migrations") as { version: number }[]).map((r) => Number(r.version)));
    for (const m of pendingMigrations(SQLITE_MIGRATIONS, applied)) {
      this.tx(() => {
        for (const stmt of m.statements) this.db.exec(stmt);
        this.db.run("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", [m.version, m.name, Date.now()]);
      });
    }
  }

  /** The schema versions applied, oldest first (tests, doctor). */
  async schemaVersions(): Promise<number[]> {
    return (this.db.all("SELECT version FROM schema_migrations ORDER BY version") as { version: number }[]).map((r) => Number(r.version));
  }

  private tx<T>(fn: () => T): T {
    this.db.exec("BEGIN IMMEDIATE");
    try {
      const out = fn();
      this.db.exec("COMMIT");
      return out;
    } catch (err) {
      this.db.exec("ROLLBACK");
      throw err;
    }
  }

  async putSandbox(r: SandboxRecord): Promise<void> {
    this.tx(() => {
      this.db.run(
        `INSERT INTO sandboxes (id, state, template_id, started_at, end_at, node, record) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(id) DO UPDATE SET state = excluded.state, template_id = excluded.template_id,
           started_at = excluded.started_at, end_at = excluded.end_at, node = excluded.node, record = excluded.record`,
        [r.id, r.state, r.templateId, r.startedAt, r.endAt, r.node ?? null, JSON.stringify(r)],
      );
      this.db.run("DELETE FROM sandbox_metadata WHERE sandbox_id = ?", [r.id]);
      for (const [k, v] of Object.entries(r.metadata)) {
        this.db.run("INSERT INTO sandbox_metadata (sandbox_id, key, value) VALUES (?, ?, ?)", [r.id, k, v]);
      }
    });
  }

  async getSandbox(id: string): Promise<SandboxRecord | undefined> {
    const row = this.db.get("SELECT record FROM sandboxes WHERE id = ?", [id]) as { record: string } | null;
    return row ? (JSON.parse(row.record) as SandboxRecord) : undefined;
  }

  async listSandboxes(filter: ListFilter = {}): Promise<SandboxRecord[]> {
    const where: string[] = [];
    const args: (string | number)[] = [];
    const states = filter.states?.length ? filter.states : LIVE_STATES;
    where.push(`state IN (${states.map(() => "?").join(", ")})`);
    args.push(...states);
    if (filter.templateId) {
      where.push("template_id = ?");
      args.push(filter.templateId);
    }
    if (filter.startedAfter !== undefined) {
      where.push("started_at >= ?");
      args.push(filter.startedAfter);
    }
    if (filter.node !== undefined) {
      where.push("node = ?");
      args.push(filter.node);
    }
    for (const [k, v] of Object.entries(filter.metadata ?? {})) {
      where.push("EXISTS (SELECT 1 FROM sandbox_metadata m WHERE m.sandbox_id = sandboxes.id AND m.key = ? AND m.value = ?)");
      args.push(k, v);
    }
    const rows = this.db.all(`SELECT record FROM sandboxes WHERE ${where.join(" AND ")} ORDER BY started_at, id`, args) as {
      record: string;
    }[];
    return rows.map((r) => JSON.parse(r.record) as SandboxRecord);
  }

  async deleteSandbox(id: string): Promise<void> {
    this.db.run("DELETE FROM sandboxes WHERE id = ?", [id]);
  }

  private keyInfo(row: Record<string, unknown>): ApiKeyInfo {
    return {
      id: String(row.id),
      name: String(row.name),
      mask: String(row.mask),
      createdAt: Number(row.created_at),
      ...(row.last_used_at != null ? { lastUsedAt: Number(row.last_used_at) } : {}),
    };
  }

  async createApiKey(name: string): Promise<{ key: string; info: ApiKeyInfo }> {
    const key = newApiKey();
    return { key, info: await this.importApiKey(key, name) };
  }

  async importApiKey(key: string, name: string): Promise<ApiKeyInfo> {
    const hash = hashKey(key);
    const existing = this.db.get("SELECT * FROM api_keys WHERE hash = ?", [hash]);
    if (existing) return this.keyInfo(existing);
    const id = newKeyId();
    this.db.run("INSERT INTO api_keys (id, name, hash, mask, created_at) VALUES (?, ?, ?, ?, ?)", [
      id,
      name,
      hash,
      maskKey(key),
      Date.now(),
    ]);
    return this.keyInfo(this.db.get("SELECT * FROM api_keys WHERE id = ?", [id])!);
  }

  async verifyApiKey(key: string): Promise<ApiKeyInfo | undefined> {
    // Looking up by the hash compares digests, not the secret itself.
    const row = this.db.get("SELECT * FROM api_keys WHERE hash = ?", [hashKey(key)]);
    if (!row) return undefined;
    const now = Date.now();
    if (!row.last_used_at || now - Number(row.last_used_at) > LAST_USED_GRANULARITY_MS) {
      this.db.run("UPDATE api_keys SET last_used_at = ? WHERE id = ?", [now, String(row.id)]);
    }
    return this.keyInfo(row);
  }

  async listApiKeys(): Promise<ApiKeyInfo[]> {
    return this.db.all("SELECT * FROM api_keys ORDER BY created_at, id").map((r) => this.keyInfo(r));
  }

  async revokeApiKey(idOrKey: string): Promise<boolean> {
    const r = this.db.run("DELETE FROM api_keys WHERE id = ? OR hash = ?", [idOrKey, hashKey(idOrKey)]);
    return r.changes > 0;
  }

  async putSnapshot(r: SnapshotRecord): Promise<void> {
    this.db.run(
      `INSERT INTO snapshots (id, tag, name, sandbox_id, created_at, record) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT(id, tag) DO UPDATE SET name = excluded.name, sandbox_id = excluded.sandbox_id,
         created_at = excluded.created_at, record = excluded.record`,
      [r.id, r.tag, r.name ?? null, r.sandboxId, r.createdAt, JSON.stringify(r)],
    );
  }

  async getSnapshot(id: string, tag: string): Promise<SnapshotRecord | undefined> {
    const row = this.db.get("SELECT record FROM snapshots WHERE id = ? AND tag = ?", [id, tag]) as { record: string } | null;
    return row ? (JSON.parse(row.record) as SnapshotRecord) : undefined;
  }

  async listSnapshots(filter: SnapshotFilter = {}): Promise<SnapshotRecord[]> {
    const where = filter.sandboxId ? "WHERE sandbox_id = ?" : "";
    const rows = this.db.all(`SELECT record FROM snapshots ${where} ORDER BY created_at DESC, id DESC, tag DESC`, filter.sandboxId ? [filter.sandboxId] : []) as {
      record: string;
    }[];
    return rows.map((r) => JSON.parse(r.record) as SnapshotRecord);
  }

  async deleteSnapshot(id: string, tag: string): Promise<boolean> {
    return this.db.run("DELETE FROM snapshots WHERE id = ? AND tag = ?", [id, tag]).changes > 0;
  }

  async putTemplate(r: TemplateRecord): Promise<void> {
    this.tx(() => {
      this.db.run(
        `INSERT INTO templates (id, created_at, record) VALUES (?, ?, ?)
         ON CONFLICT(id) DO UPDATE SET record = excluded.record`,
        [r.id, r.createdAt, JSON.stringify(r)],
      );
      this.db.run("DELETE FROM template_names WHERE template_id = ?", [r.id]);
      for (const name of r.names) this.db.run("INSERT INTO template_names (name, template_id) VALUES (?, ?)", [name, r.id]);
    });
  }

  async getTemplate(id: string): Promise<TemplateRecord | undefined> {
    const row = this.db.get("SELECT record FROM templates WHERE id = ?", [id]) as { record: string } | null;
    return row ? (JSON.parse(row.record) as TemplateRecord) : undefined;
  }

  async templateByName(name: string): Promise<TemplateRecord | undefined> {
    const row = this.db.get("SELECT t.record FROM template_names n JOIN templates t ON t.id = n.template_id WHERE n.name = ?", [name]) as { record: string } | null;
    return row ? (JSON.parse(row.record) as TemplateRecord) : undefined;
  }

  async listTemplates(): Promise<TemplateRecord[]> {
    return (this.db.all("SELECT record FROM templates ORDER BY created_at, id") as { record: string }[]).map((r) => JSON.parse(r.record) as TemplateRecord);
  }

  async deleteTemplate(id: string): Promise<boolean> {
    return this.tx(() => {
      this.db.run("DELETE FROM template_tags WHERE template_id = ?", [id]);
      this.db.run("DELETE FROM template_builds WHERE template_id = ?", [id]);
      this.db.run("DELETE FROM template_names WHERE template_id = ?", [id]);
      return this.db.run("DELETE FROM templates WHERE id = ?", [id]).changes > 0;
    });
  }

  async putTemplateBuild(r: TemplateBuildRecord): Promise<void> {
    this.db.run(
      `INSERT INTO template_builds (id, template_id, created_at, record) VALUES (?, ?, ?, ?)
       ON CONFLICT(id) DO UPDATE SET record = excluded.record`,
      [r.id, r.templateId, r.createdAt, JSON.stringify(r)],
    );
  }

  async getTemplateBuild(id: string): Promise<TemplateBuildRecord | undefined> {
    const row = this.db.get("SELECT record FROM template_builds WHERE id = ?", [id]) as { record: string } | null;
    return row ? (JSON.parse(row.record) as TemplateBuildRecord) : undefined;
  }

  async listTemplateBuilds(templateId?: string): Promise<TemplateBuildRecord[]> {
    const rows = (templateId
      ? this.db.all("SELECT record FROM template_builds WHERE template_id = ? ORDER BY created_at DESC, id DESC", [templateId])
      : this.db.all("SELECT record FROM template_builds ORDER BY created_at DESC, id DESC")) as { record: string }[];
    return rows.map((r) => JSON.parse(r.record) as TemplateBuildRecord);
  }

  async deleteTemplateBuild(id: string): Promise<void> {
    this.db.run("DELETE FROM template_builds WHERE id = ?", [id]);
  }

  async putTemplateTag(r: TemplateTagRecord): Promise<void> {
    this.db.run(
      `INSERT INTO template_tags (template_id, tag, build_id, created_at) VALUES (?, ?, ?, ?)
       ON CONFLICT(template_id, tag) DO UPDATE SET build_id = excluded.build_id, created_at = excluded.created_at`,
      [r.templateId, r.tag, r.buildId, r.createdAt],
    );
  }

  private tagOf(row: Record<string, unknown>): TemplateTagRecord {
    return { templateId: String(row.template_id), tag: String(row.tag), buildId: String(row.build_id), createdAt: Number(row.created_at) };
  }

  async getTemplateTag(templateId: string, tag: string): Promise<TemplateTagRecord | undefined> {
    const row = this.db.get("SELECT * FROM template_tags WHERE template_id = ? AND tag = ?", [templateId, tag]);
    return row ? this.tagOf(row) : undefined;
  }

  async listTemplateTags(templateId: string): Promise<TemplateTagRecord[]> {
    return this.db.all("SELECT * FROM template_tags WHERE template_id = ? ORDER BY created_at, tag", [templateId]).map((r) => this.tagOf(r));
  }

  async deleteTemplateTag(templateId: string, tag: string): Promise<boolean> {
    return this.db.run("DELETE FROM template_tags WHERE template_id = ? AND tag = ?", [templateId, tag]).changes > 0;
  }

  async getSetting(key: string): Promise<string | undefined> {
    const row = this.db.get("SELECT value FROM settings WHERE key = ?", [key]) as { value: string } | null;
    return row?.value;
  }

  async setSetting(key: string, value: string): Promise<void> {
    this.db.run("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", [key, value]);
  }

  async putNode(n: NodeRecord): Promise<void> {
    this.db.run("INSERT INTO nodes (name, heartbeat_at, state, record) VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, record = excluded.record", [
      n.name,
      n.heartbeatAt,
      n.state,
      JSON.stringify(n),
    ]);
  }

  async getNode(name: string): Promise<NodeRecord | undefined> {
    const row = this.db.get("SELECT state, record FROM nodes WHERE name = ?", [name]) as { state: string; record: string } | null;
    return row ? nodeOf(row) : undefined;
  }

  async nodeLoads(): Promise<{ node: string; sandboxes: number; memoryMB: number; cpus: number }[]> {
    const rows = this.db.all(
      "SELECT node, count(*) AS sandboxes, coalesce(sum(json_extract(record, '$.memoryMB')), 0) AS memory, coalesce(sum(json_extract(record, '$.cpuCount')), 0) AS cpus FROM sandboxes WHERE node IS NOT NULL AND state <> 'killed' GROUP BY node",
    ) as { node: string; sandboxes: number; memory: number; cpus: number }[];
    return rows.map((r) => ({ node: r.node, sandboxes: Number(r.sandboxes), memoryMB: Number(r.memory), cpus: Number(r.cpus) }));
  }

  async listNodes(): Promise<NodeRecord[]> {
    return (this.db.all("SELECT state, record FROM nodes ORDER BY name") as { state: string; record: string }[]).map(nodeOf);
  }

  async setNodeState(name: string, state: NodeRecord["state"]): Promise<boolean> {
    return this.db.run("UPDATE nodes SET state = ? WHERE name = ?", [state, name]).changes > 0;
  }

  async deleteNode(name: string): Promise<boolean> {
    return this.db.run("DELETE FROM nodes WHERE name = ?", [name]).changes > 0;
  }

  async addVolume(v: VolumeRecord): Promise<boolean> {
    return this.db.run("INSERT INTO volumes (id, name, created_at, record) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", [v.id, v.name, v.createdAt, JSON.stringify(v)]).changes > 0;
  }

  async getVolume(id: string): Promise<VolumeRecord | undefined> {
    const row = this.db.get("SELECT record FROM volumes WHERE id = ?", [id]) as { record: string } | null;
    return row ? (JSON.parse(row.record) as VolumeRecord) : undefined;
  }

  async volumeByName(name: string): Promise<VolumeRecord | undefined> {
    const row = this.db.get("SELECT record FROM volumes WHERE name = ?", [name]) as { record: string } | null;
    return row ? (JSON.parse(row.record) as VolumeRecord) : undefined;
  }

  async listVolumes(): Promise<VolumeRecord[]> {
    return (this.db.all("SELECT record FROM volumes ORDER BY created_at, id") as { record: string }[]).map((r) => JSON.parse(r.record) as VolumeRecord);
  }

  async deleteVolume(id: string): Promise<boolean> {
    return this.db.run("DELETE FROM volumes WHERE id = ?", [id]).changes > 0;
  }

  async addSecret(r: SecretRecord, first: SealedVersion): Promise<boolean> {
    return this.tx(() => {
      const added = this.db.run(
        "INSERT INTO secrets (id, team, name, current_version, metadata, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [r.id, r.team, r.name, r.currentVersion, JSON.stringify(r.metadata), r.createdAt, r.updatedAt],
      ).changes > 0;
      if (added) this.db.run("INSERT INTO secret_versions (secret_id, version, sealed, created_at) VALUES (?, ?, ?, ?)", [first.secretId, first.version, first.sealed, first.createdAt]);
      return added;
    });
  }

  async getSecret(team: string, idOrName: string): Promise<SecretRecord | undefined> {
    const row = this.db.get("SELECT * FROM secrets WHERE team = ? AND (id = ? OR name = ?)", [team, idOrName, idOrName]);
    return row ? secretOf(row) : undefined;
  }

  async listSecrets(team: string, opts: { after?: string; limit: number }): Promise<SecretRecord[]> {
    return this.db.all("SELECT * FROM secrets WHERE team = ? AND name > ? ORDER BY name LIMIT ?", [team, opts.after ?? "", opts.limit]).map(secretOf);
  }

  async addSecretVersion(team: string, id: string, seal: (version: number) => string, metadata: Record<string, string> | undefined, now: number): Promise<SecretRecord | undefined> {
    return this.tx(() => {
      const row = this.db.get("SELECT * FROM secrets WHERE team = ? AND id = ?", [team, id]);
      if (!row) return undefined;
      const version = Number(row.current_version) + 1;
      this.db.run("INSERT INTO secret_versions (secret_id, version, sealed, created_at) VALUES (?, ?, ?, ?)", [id, version, seal(version), now]);
      this.db.run("UPDATE secrets SET current_version = ?, updated_at = ?, metadata = coalesce(?, metadata) WHERE id = ?", [version, now, metadata ? JSON.stringify(metadata) : null, id]);
      return secretOf(this.db.get("SELECT * FROM secrets WHERE id = ?", [id])!);
    });
  }

  async currentSecret(team: string, name: string): Promise<{ record: SecretRecord; version: SealedVersion } | undefined> {
    const row = this.db.get(
      "SELECT s.*, v.secret_id, v.version, v.sealed, v.created_at AS version_created_at FROM secrets s JOIN secret_versions v ON v.secret_id = s.id AND v.version = s.current_version WHERE s.team = ? AND s.name = ?",
      [team, name],
    );
    return row ? { record: secretOf(row), version: sealedOf(row) } : undefined;
  }

  async deleteSecret(team: string, id: string): Promise<boolean> {
    return this.tx(() => {
      const gone = this.db.run("DELETE FROM secrets WHERE team = ? AND id = ?", [team, id]).changes > 0;
      if (gone) this.db.run("DELETE FROM secret_versions WHERE secret_id = ?", [id]);
      return gone;
    });
  }

  async initSetting(key: string, value: string): Promise<string> {
    this.db.run("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO NOTHING", [key, value]);
    return (await this.getSetting(key))!;
  }

  async close(): Promise<void> {
    if (this.db.isOpen) this.db.close();
  }
}
