// What the SQLite and Postgres stores share: API keys' form and hashing, and schema versions.
import { createHash, randomBytes } from "node:crypto";
import type { NodeRecord } from "../domain/node.js";
import type { SealedVersion, SecretRecord } from "../domain/secret.js";

/** One version of a store's schema: statements run in one transaction, recorded in schema_migrations. */
export interface Migration {
  version: number;
  name: string;
  statements: string[];
}

/** The migrations not applied yet, in order; refuses a database newer than this code. */
export function pendingMigrations(all: Migration[], applied: Set<number>): Migration[] {
  const newest = Math.max(0, ...all.map((m) => m.version));
  const ahead = [...applied].filter((v) => v > newest);
  if (ahead.length) {
    throw new Error(`the database has schema version ${Math.max(...ahead)}, newer than this locale2b knows (${newest}): run the newer locale2b, or restore a backup taken before the upgrade`);
  }
  return all.filter((m) => !applied.has(m.version)).sort((a, b) => a.version - b.version);
}

/** `e2b_` + 40 hex: the form E2B's keys have (the SDKs check the prefix). */
export function newApiKey(): string {
  return `e2b_${randomBytes(20).toString("hex")}`;
}

export function newKeyId(): string {
  return `key_${randomBytes(6).toString("hex")}`;
}

/** Stores keep this, never the key: a lookup by hash compares digests, not the secret. */
export function hashKey(key: string): string {
  return createHash("sha256").update(key).digest("hex");
}

export function maskKey(key: string): string {
  return `${key.slice(0, 8)}…${key.slice(-4)}`;
}

/** How long a key's last use may lag before it is written again (a key in use is not a write per request). */
export const LAST_USED_GRANULARITY_MS = 60_000;

/** A node row: its record as its last heartbeat wrote it, with the state the store keeps (a cordon outlives heartbeats). */
export function nodeOf(row: { state: string; record: string }): NodeRecord {
  return { ...(JSON.parse(row.record) as NodeRecord), state: row.state === "cordoned" ? "cordoned" : "ready" };
}

/** A secrets row as both stores read it (numbers may come back as strings from Postgres BIGINT). */
export function secretOf(row: Record<string, unknown>): SecretRecord {
  return {
    id: String(row.id),
    team: String(row.team),
    name: String(row.name),
    currentVersion: Number(row.current_version),
    metadata: JSON.parse(String(row.metadata)) as Record<string, string>,
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}

export function sealedOf(row: Record<string, unknown>): SealedVersion {
  return { secretId: String(row.secret_id), version: Number(row.version), sealed: String(row.sealed), createdAt: Number(row.version_created_at ?? row.created_at) };
}
