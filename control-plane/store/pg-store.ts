import pg from "pg";
import { LIVE_STATES, type ListFilter, type SandboxRecord } from "../domain/sandbox.js";
import type { SnapshotFilter, SnapshotRecord } from "../domain/snapshot.js";
import type { TemplateBuildRecord, TemplateRecord, TemplateTagRecord } from "../domain/template.js";
import { hashKey, LAST_USED_GRANULARITY_MS, maskKey, newApiKey, newKeyId, nodeOf, pendingMigrations } from "./store-common.js";
import type { ApiKeyInfo, Store } from "./store.js";
import type { NodeRecord } from "../domain/node.js";
import type { VolumeRecord } from "../domain/volume.js";
import type { SealedVersion, SecretRecord } from "../domain/secret.js";
import { PG_MIGRATIONS } from "./pg-migrations.js";
import * as secrets from "./pg-secrets.js";

/** Any number for pg_advisory_xact_lock, the same in every replica: migrations run one replica at a time. */
const MIGRATION_LOCK = 0x6c326230; // "l2b0"

/** The first key of the node-name advisory locks (the second: the name's hash). */
const NODE_LOCK = 0x6c32626e; // "l2bn"

export type Queryable = Pick<pg.PoolClient, "query">;

/** `fn` in one transaction on one of the pool's clients: committed when it returns, rolled back when it throws. */
export async function inTransaction<T>(pool: pg.Pool, fn: (c: Queryable) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    const out = await fn(c);
    await c.query("COMMIT");
    return out;
  } catch (err) {
    await c.query("ROLLBACK").catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
}

/**
 * The control plane's state in Postgres, for a fleet: any number of API
 * replicas and node agents share it. Same contract as SqliteStore (the store
 * suite runs against both); every write is committed before its promise
 * resolves.
 */
export class PgStore implements Store {
  private readonly pool: pg.Pool;
  /** The connection that holds this server's node name (claimNode). */
  private nodeClient: pg.PoolClient | undefined;

  private constructor(pool: pg.Pool) {
    this.pool = pool;
  }

  /**
   * Connects (a `postgres://` URL, or libpq's PG* variables when empty) and
   * applies the migrations this database lacks.
   */
  static async open(url: string, opts: { max?: number } = {}): Promise<PgStore> {
    const pool = new pg.Pool({ ...(url ? { connectionString: url } : {}), max: opts.max ?? 10, application_name: "locale2b" });
    // An idle client's error (the server restarted) must not crash the process: the pool drops that client.
    pool.on("error", () => undefined);
    const store = new PgStore(pool);
    try {
      await store.migrate();
    } catch (err) {
      await pool.end().catch(() => undefined);
      throw new Error(`cannot use the Postgres database${url ? ` at ${redact(url)}` : ""}: ${(err as Error).message}`);
    }
    return store;
  }

  private tx<T>(fn: (c: Queryable) => Promise<T>): Promise<T> {
    return inTransaction(this.pool, fn);
  }


  private async migrate(): Promise<void> {
    await this.tx(async (c) => {
      await c.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK]);
      await c.query("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)");
      const applied = new Set((await c.query<{ version: number }>("SELECT version FROM schema_migrations")).rows.map((r) => Number(r.version)));
      for (const m of pendingMigrations(PG_MIGRATIONS, applied)) {
        for (const stmt of m.statements) await c.query(stmt);
        await c.query("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)", [m.version, m.name, Date.now()]);
      }
    });
  }

  async schemaVersions(): Promise<number[]> {
    return (await this.pool.query<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version")).rows.map((r) => Number(r.version));
  }

  private async rows<T extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<T[]> {
    return (await this.pool.query<T>(sql, params)).rows;
  }

  private async records<T>(sql: string, params: unknown[] = []): Promise<T[]> {
    return (await this.rows<{ record: string }>(sql, params)).map((r) => JSON.parse(r.record) as T);
  }

  private async record<T>(sql: string, params: unknown[] = []): Promise<T | undefined> {
    return (await this.records<T>(sql, params))[0];
  }

  private async changes(sql: string, params: unknown[] = []): Promise<number> {
    return (await this.pool.query(sql, params)).rowCount ?? 0;
  }

  async putSandbox(r: SandboxRecord): Promise<void> {
    await this.tx(async (c) => {
      await c.query(
        `INSERT INTO sandboxes (id, state, template_id, started_at, end_at, node, record) VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (id) DO UPDATE SET state = excluded.state, template_id = excluded.template_id,
           started_at = excluded.started_at, end_at = excluded.end_at, node = excluded.node, record = excluded.record`,
        [r.id, r.state, r.templateId, r.startedAt, r.endAt, r.node ?? null, JSON.stringify(r)],
      );
      await c.query("DELETE FROM sandbox_metadata WHERE sandbox_id = $1", [r.id]);
      const entries = Object.entries(r.metadata);
      if (entries.length) {
        await c.query("INSERT INTO sandbox_metadata (sandbox_id, key, value) SELECT $1, k, v FROM unnest($2::text[], $3::text[]) AS m(k, v)", [
          r.id,
          entries.map(([k]) => k),
          entries.map(([, v]) => v),
        ]);
      }
    });
  }

  getSandbox(id: string): Promise<SandboxRecord | undefined> {
    return this.record<SandboxRecord>("SELECT record FROM sandboxes WHERE id = $1", [id]);
  }

  listSandboxes(filter: ListFilter = {}): Promise<SandboxRecord[]> {
    const args: unknown[] = [];
    const arg = (v: unknown): string => {
      args.push(v);
      return `$${args.length}`;
    };
    const where = [`state = ANY(${arg(filter.states?.length ? filter.states : LIVE_STATES)}::text[])`];
    if (filter.templateId) where.push(`template_id = ${arg(filter.templateId)}`);
    if (filter.startedAfter !== undefined) where.push(`started_at >= ${arg(filter.startedAfter)}`);
    if (filter.node !== undefined) where.push(`node = ${arg(filter.node)}`);
    for (const [k, v] of Object.entries(filter.metadata ?? {})) {
      where.push(`EXISTS (SELECT 1 FROM sandbox_metadata m WHERE m.sandbox_id = sandboxes.id AND m.key = ${arg(k)} AND m.value = ${arg(v)})`);
    }
    return this.records<SandboxRecord>(`SELECT record FROM sandboxes WHERE ${where.join(" AND ")} ORDER BY started_at, id COLLATE "C"`, args);
  }

  async deleteSandbox(id: string): Promise<void> {
    await this.pool.query("DELETE FROM sandboxes WHERE id = $1", [id]);
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
    // Two replicas importing the same key at once: the second's insert does nothing, both read the one row.
    await this.pool.query("INSERT INTO api_keys (id, name, hash, mask, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (hash) DO NOTHING", [
      newKeyId(),
      name,
      hashKey(key),
      maskKey(key),
      Date.now(),
    ]);
    return this.keyInfo((await this.rows("SELECT * FROM api_keys WHERE hash = $1", [hashKey(key)]))[0]!);
  }

  async verifyApiKey(key: string): Promise<ApiKeyInfo | undefined> {
    const row = (await this.rows("SELECT * FROM api_keys WHERE hash = $1", [hashKey(key)]))[0];
    if (!row) return undefined;
    const now = Date.now();
    if (!row.last_used_at || now - Number(row.last_used_at) > LAST_USED_GRANULARITY_MS) {
      await this.pool.query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2", [now, String(row.id)]);
    }
    return this.keyInfo(row);
  }

  async listApiKeys(): Promise<ApiKeyInfo[]> {
    return (await this.rows('SELECT * FROM api_keys ORDER BY created_at, id COLLATE "C"')).map((r) => this.keyInfo(r));
  }

  async revokeApiKey(idOrKey: string): Promise<boolean> {
    return (await this.changes("DELETE FROM api_keys WHERE id = $1 OR hash = $2", [idOrKey, hashKey(idOrKey)])) > 0;
  }

  async putSnapshot(r: SnapshotRecord): Promise<void> {
    await this.pool.query(
      `INSERT INTO snapshots (id, tag, name, sandbox_id, created_at, record) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (id, tag) DO UPDATE SET name = excluded.name, sandbox_id = excluded.sandbox_id,
         created_at = excluded.created_at, record = excluded.record`,
      [r.id, r.tag, r.name ?? null, r.sandboxId, r.createdAt, JSON.stringify(r)],
    );
  }

  getSnapshot(id: string, tag: string): Promise<SnapshotRecord | undefined> {
    return this.record<SnapshotRecord>("SELECT record FROM snapshots WHERE id = $1 AND tag = $2", [id, tag]);
  }

  listSnapshots(filter: SnapshotFilter = {}): Promise<SnapshotRecord[]> {
    const where = filter.sandboxId ? "WHERE sandbox_id = $1" : "";
    return this.records<SnapshotRecord>(
      `SELECT record FROM snapshots ${where} ORDER BY created_at DESC, id COLLATE "C" DESC, tag COLLATE "C" DESC`,
      filter.sandboxId ? [filter.sandboxId] : [],
    );
  }

  async deleteSnapshot(id: string, tag: string): Promise<boolean> {
    return (await this.changes("DELETE FROM snapshots WHERE id = $1 AND tag = $2", [id, tag])) > 0;
  }

  async putTemplate(r: TemplateRecord): Promise<void> {
    await this.tx(async (c) => {
      await c.query(
        `INSERT INTO templates (id, created_at, record) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET record = excluded.record`,
        [r.id, r.createdAt, JSON.stringify(r)],
      );
      await c.query("DELETE FROM template_names WHERE template_id = $1", [r.id]);
      if (r.names.length) await c.query("INSERT INTO template_names (name, template_id) SELECT n, $1 FROM unnest($2::text[]) AS n", [r.id, r.names]);
    });
  }

  getTemplate(id: string): Promise<TemplateRecord | undefined> {
    return this.record<TemplateRecord>("SELECT record FROM templates WHERE id = $1", [id]);
  }

  templateByName(name: string): Promise<TemplateRecord | undefined> {
    return this.record<TemplateRecord>("SELECT t.record FROM template_names n JOIN templates t ON t.id = n.template_id WHERE n.name = $1", [name]);
  }

  listTemplates(): Promise<TemplateRecord[]> {
    return this.records<TemplateRecord>('SELECT record FROM templates ORDER BY created_at, id COLLATE "C"');
  }

  deleteTemplate(id: string): Promise<boolean> {
    return this.tx(async (c) => {
      await c.query("DELETE FROM template_tags WHERE template_id = $1", [id]);
      await c.query("DELETE FROM template_builds WHERE template_id = $1", [id]);
      await c.query("DELETE FROM template_names WHERE template_id = $1", [id]);
      return ((await c.query("DELETE FROM templates WHERE id = $1", [id])).rowCount ?? 0) > 0;
    });
  }

  async putTemplateBuild(r: TemplateBuildRecord): Promise<void> {
    await this.pool.query(
      `INSERT INTO template_builds (id, template_id, created_at, record) VALUES ($1, $2, $3, $4)
       ON CONFLICT (id) DO UPDATE SET record = excluded.record`,
      [r.id, r.templateId, r.createdAt, JSON.stringify(r)],
    );
  }

  getTemplateBuild(id: string): Promise<TemplateBuildRecord | undefined> {
    return this.record<TemplateBuildRecord>("SELECT record FROM template_builds WHERE id = $1", [id]);
  }

  listTemplateBuilds(templateId?: string): Promise<TemplateBuildRecord[]> {
    return templateId
      ? this.records<TemplateBuildRecord>('SELECT record FROM template_builds WHERE template_id = $1 ORDER BY created_at DESC, id COLLATE "C" DESC', [templateId])
      : this.records<TemplateBuildRecord>('SELECT record FROM template_builds ORDER BY created_at DESC, id COLLATE "C" DESC');
  }

  async deleteTemplateBuild(id: string): Promise<void> {
    await this.pool.query("DELETE FROM template_builds WHERE id = $1", [id]);
  }

  async putTemplateTag(r: TemplateTagRecord): Promise<void> {
    await this.pool.query(
      `INSERT INTO template_tags (template_id, tag, build_id, created_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (template_id, tag) DO UPDATE SET build_id = excluded.build_id, created_at = excluded.created_at`,
      [r.templateId, r.tag, r.buildId, r.createdAt],
    );
  }

  private tagOf(row: Record<string, unknown>): TemplateTagRecord {
    return { templateId: String(row.template_id), tag: String(row.tag), buildId: String(row.build_id), createdAt: Number(row.created_at) };
  }

  async getTemplateTag(templateId: string, tag: string): Promise<TemplateTagRecord | undefined> {
    const row = (await this.rows("SELECT * FROM template_tags WHERE template_id = $1 AND tag = $2", [templateId, tag]))[0];
    return row ? this.tagOf(row) : undefined;
  }

  async listTemplateTags(templateId: string): Promise<TemplateTagRecord[]> {
    return (await this.rows('SELECT * FROM template_tags WHERE template_id = $1 ORDER BY created_at, tag COLLATE "C"', [templateId])).map((r) => this.tagOf(r));
  }

  async deleteTemplateTag(templateId: string, tag: string): Promise<boolean> {
    return (await this.changes("DELETE FROM template_tags WHERE template_id = $1 AND tag = $2", [templateId, tag])) > 0;
  }

  async getSetting(key: string): Promise<string | undefined> {
    return (await this.rows<{ value: string }>("SELECT value FROM settings WHERE key = $1", [key]))[0]?.value;
  }

  async setSetting(key: string, value: string): Promise<void> {
    await this.pool.query("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [key, value]);
  }

  async putNode(n: NodeRecord): Promise<void> {
    await this.pool.query(
      "INSERT INTO nodes (name, heartbeat_at, state, record) VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, record = excluded.record",
      [n.name, n.heartbeatAt, n.state, JSON.stringify(n)],
    );
  }

  async getNode(name: string): Promise<NodeRecord | undefined> {
    const row = (await this.rows<{ state: string; record: string }>("SELECT state, record FROM nodes WHERE name = $1", [name]))[0];
    return row ? nodeOf(row) : undefined;
  }

  async nodeLoads(): Promise<{ node: string; sandboxes: number; memoryMB: number; cpus: number }[]> {
    const rows = await this.rows<{ node: string; sandboxes: number; memory: number; cpus: number }>(
      "SELECT node, count(*)::int AS sandboxes, coalesce(sum((record::json->>'memoryMB')::int), 0)::int AS memory, coalesce(sum((record::json->>'cpuCount')::int), 0)::int AS cpus FROM sandboxes WHERE node IS NOT NULL AND state <> 'killed' GROUP BY node",
    );
    return rows.map((r) => ({ node: r.node, sandboxes: r.sandboxes, memoryMB: r.memory, cpus: r.cpus }));
  }

  async listNodes(): Promise<NodeRecord[]> {
    return (await this.rows<{ state: string; record: string }>('SELECT state, record FROM nodes ORDER BY name COLLATE "C"')).map(nodeOf);
  }

  async setNodeState(name: string, state: NodeRecord["state"]): Promise<boolean> {
    return (await this.changes("UPDATE nodes SET state = $1 WHERE name = $2", [state, name])) > 0;
  }

  async deleteNode(name: string): Promise<boolean> {
    return (await this.changes("DELETE FROM nodes WHERE name = $1", [name])) > 0;
  }

  async addVolume(v: VolumeRecord): Promise<boolean> {
    return (await this.changes("INSERT INTO volumes (id, name, created_at, record) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING", [v.id, v.name, v.createdAt, JSON.stringify(v)])) > 0;
  }

  async getVolume(id: string): Promise<VolumeRecord | undefined> {
    const row = (await this.rows<{ record: string }>("SELECT record FROM volumes WHERE id = $1", [id]))[0];
    return row ? (JSON.parse(row.record) as VolumeRecord) : undefined;
  }

  async volumeByName(name: string): Promise<VolumeRecord | undefined> {
    const row = (await this.rows<{ record: string }>("SELECT record FROM volumes WHERE name = $1", [name]))[0];
    return row ? (JSON.parse(row.record) as VolumeRecord) : undefined;
  }

  async listVolumes(): Promise<VolumeRecord[]> {
    return (await this.rows<{ record: string }>('SELECT record FROM volumes ORDER BY created_at, id COLLATE "C"')).map((r) => JSON.parse(r.record) as VolumeRecord);
  }

  async deleteVolume(id: string): Promise<boolean> {
    return (await this.changes("DELETE FROM volumes WHERE id = $1", [id])) > 0;
  }

  addSecret(r: SecretRecord, first: SealedVersion): Promise<boolean> {
    return this.tx((c) => secrets.add(c, r, first));
  }

  getSecret(team: string, idOrName: string): Promise<SecretRecord | undefined> {
    return secrets.get(this.pool, team, idOrName);
  }

  listSecrets(team: string, opts: { after?: string; limit: number }): Promise<SecretRecord[]> {
    return secrets.list(this.pool, team, opts);
  }

  addSecretVersion(team: string, id: string, seal: (version: number) => string, metadata: Record<string, string> | undefined, now: number): Promise<SecretRecord | undefined> {
    return this.tx((c) => secrets.addVersion(c, team, id, seal, metadata, now));
  }

  currentSecret(team: string, name: string): Promise<{ record: SecretRecord; version: SealedVersion } | undefined> {
    return secrets.current(this.pool, team, name);
  }

  deleteSecret(team: string, id: string): Promise<boolean> {
    return this.tx((c) => secrets.remove(c, team, id));
  }

  /**
   * Stores `value` unless the key has one: the value the key holds after
   * (replicas starting together agree on one token seed).
   */
  async initSetting(key: string, value: string): Promise<string> {
    await this.pool.query("INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING", [key, value]);
    return (await this.getSetting(key))!;
  }

  /**
   * Holds `node` for this store's life (a session advisory lock on a
   * connection of its own): a second server that claims the same name is
   * refused, as a second server on one data dir is.
   */
  async claimNode(node: string): Promise<void> {
    const c = await this.pool.connect();
    const { rows } = await c.query<{ ok: boolean }>("SELECT pg_try_advisory_lock($1, hashtext($2)) AS ok", [NODE_LOCK, node]);
    if (!rows[0]?.ok) {
      c.release();
      throw new Error(`node name '${node}' is in use by another locale2b server on this database: stop it, or give this one another --node-name`);
    }
    this.nodeClient = c;
  }

  async close(): Promise<void> {
    this.nodeClient?.release();
    this.nodeClient = undefined;
    await this.pool.end();
  }
}

/** A URL as logs and errors may show it: without its password. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(an unparsable URL)";
  }
}
