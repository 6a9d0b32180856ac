// The secrets tables on Postgres (PgStore's secret methods): a secret's record
// and its sealed versions, written in the caller's transaction where several
// statements must hold together.
import { sealedOf, secretOf } from "./store-common.js";
import type { SealedVersion, SecretRecord } from "../domain/secret.js";
import type { Queryable } from "./pg-store.js";

const rows = async (q: Queryable, sql: string, params: unknown[]) => (await q.query(sql, params)).rows as Record<string, unknown>[];

/** A new secret with its first version; false when the team has one of that name or id. */
export async function add(c: Queryable, r: SecretRecord, first: SealedVersion): Promise<boolean> {
  const added = ((
    await c.query(
      "INSERT INTO secrets (id, team, name, current_version, metadata, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
      [r.id, r.team, r.name, r.currentVersion, JSON.stringify(r.metadata), r.createdAt, r.updatedAt],
    )
  ).rowCount ?? 0) > 0;
  if (added) await c.query("INSERT INTO secret_versions (secret_id, version, sealed, created_at) VALUES ($1, $2, $3, $4)", [first.secretId, first.version, first.sealed, first.createdAt]);
  return added;
}

export async function get(q: Queryable, team: string, idOrName: string): Promise<SecretRecord | undefined> {
  const row = (await rows(q, "SELECT * FROM secrets WHERE team = $1 AND (id = $2 OR name = $2)", [team, idOrName]))[0];
  return row ? secretOf(row) : undefined;
}

export async function list(q: Queryable, team: string, opts: { after?: string; limit: number }): Promise<SecretRecord[]> {
  return (await rows(q, 'SELECT * FROM secrets WHERE team = $1 AND name COLLATE "C" > $2 ORDER BY name COLLATE "C" LIMIT $3', [team, opts.after ?? "", opts.limit])).map(secretOf);
}

/** The next version, sealed by `seal`; undefined when the secret is gone. */
export async function addVersion(c: Queryable, team: string, id: string, seal: (version: number) => string, metadata: Record<string, string> | undefined, now: number): Promise<SecretRecord | undefined> {
  // The row lock orders concurrent updates: each reads the number the one before it wrote.
  const row = (await c.query("SELECT current_version FROM secrets WHERE team = $1 AND id = $2 FOR UPDATE", [team, id])).rows[0] as { current_version: string } | undefined;
  if (!row) return undefined;
  const version = Number(row.current_version) + 1;
  await c.query("INSERT INTO secret_versions (secret_id, version, sealed, created_at) VALUES ($1, $2, $3, $4)", [id, version, seal(version), now]);
  const updated = await c.query("UPDATE secrets SET current_version = $1, updated_at = $2, metadata = coalesce($3, metadata) WHERE id = $4 RETURNING *", [
    version,
    now,
    metadata ? JSON.stringify(metadata) : null,
    id,
  ]);
  return secretOf(updated.rows[0] as Record<string, unknown>);
}

/** A secret by name with its current version. */
export async function current(q: Queryable, team: string, name: string): Promise<{ record: SecretRecord; version: SealedVersion } | undefined> {
  const row = (
    await rows(
      q,
      "SELECT s.*, v.secret_id, v.version, v.sealed, v.created_at AS version_created_at FROM secrets s JOIN secret_versions v ON v.secret_id = s.id AND v.version = s.current_version WHERE s.team = $1 AND s.name = $2",
      [team, name],
    )
  )[0];
  return row ? { record: secretOf(row), version: sealedOf(row) } : undefined;
}

export async function remove(c: Queryable, team: string, id: string): Promise<boolean> {
  await c.query("DELETE FROM secret_versions WHERE secret_id IN (SELECT id FROM secrets WHERE team = $1 AND id = $2)", [team, id]);
  return ((await c.query("DELETE FROM secrets WHERE team = $1 AND id = $2", [team, id])).rowCount ?? 0) > 0;
}
