import type { Migration } from "./store-common.js";

/**
 * The fleet's schema, in versions (as SqliteStore's; Postgres types: times
 * are BIGINT milliseconds, records JSON text as the SQLite store keeps them,
 * so both stores hand back the same objects). Never edit a version that
 * shipped: add one.
 */
export const PG_MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: "sandboxes, api keys, settings, snapshots, templates",
    statements: [
      `CREATE TABLE sandboxes (
         id TEXT PRIMARY KEY,
         state TEXT NOT NULL,
         template_id TEXT NOT NULL,
         started_at BIGINT NOT NULL,
         end_at BIGINT NOT NULL,
         record TEXT NOT NULL
       )`,
      `CREATE INDEX sandboxes_state ON sandboxes(state, started_at)`,
      `CREATE TABLE sandbox_metadata (
         sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
         key TEXT NOT NULL,
         value TEXT NOT NULL,
         PRIMARY KEY (sandbox_id, key)
       )`,
      `CREATE TABLE api_keys (
         id TEXT PRIMARY KEY,
         name TEXT NOT NULL,
         hash TEXT NOT NULL UNIQUE,
         mask TEXT NOT NULL,
         created_at BIGINT NOT NULL,
         last_used_at BIGINT
       )`,
      `CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
      `CREATE TABLE snapshots (
         id TEXT NOT NULL,
         tag TEXT NOT NULL,
         name TEXT,
         sandbox_id TEXT NOT NULL,
         created_at BIGINT NOT NULL,
         record TEXT NOT NULL,
         PRIMARY KEY (id, tag)
       )`,
      `CREATE INDEX snapshots_created ON snapshots(created_at)`,
      `CREATE TABLE templates (
         id TEXT PRIMARY KEY,
         created_at BIGINT NOT NULL,
         record TEXT NOT NULL
       )`,
      `CREATE TABLE template_names (
         name TEXT PRIMARY KEY,
         template_id TEXT NOT NULL REFERENCES templates(id) ON DELETE CASCADE
       )`,
      `CREATE TABLE template_builds (
         id TEXT PRIMARY KEY,
         template_id TEXT NOT NULL REFERENCES templates(id) ON DELETE CASCADE,
         created_at BIGINT NOT NULL,
         record TEXT NOT NULL
       )`,
      `CREATE INDEX template_builds_template ON template_builds(template_id, created_at)`,
      `CREATE TABLE template_tags (
         template_id TEXT NOT NULL REFERENCES templates(id) ON DELETE CASCADE,
         tag TEXT NOT NULL,
         build_id TEXT NOT NULL,
         created_at BIGINT NOT NULL,
         PRIMARY KEY (template_id, tag)
       )`,
    ],
  },
  {
    version: 2,
    name: "sandboxes.node: the host a sandbox runs on",
    statements: ["ALTER TABLE sandboxes ADD COLUMN node TEXT", "CREATE INDEX sandboxes_node ON sandboxes(node, state)"],
  },
  {
    version: 3,
    name: "nodes: the hosts of a fleet, their addresses and heartbeats",
    statements: ["CREATE TABLE nodes (name TEXT PRIMARY KEY, heartbeat_at BIGINT NOT NULL, state TEXT NOT NULL, record TEXT NOT NULL)"],
  },
  {
    version: 4,
    name: "volumes: storage that outlives sandboxes",
    statements: ["CREATE TABLE volumes (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL, record TEXT NOT NULL)"],
  },
  {
    version: 5,
    name: "secrets: write-only values in versions, sealed with a key kept outside the database",
    statements: [
      `CREATE TABLE secrets (
         id TEXT PRIMARY KEY,
         team TEXT NOT NULL,
         name TEXT NOT NULL,
         current_version BIGINT NOT NULL,
         metadata TEXT NOT NULL,
         created_at BIGINT NOT NULL,
         updated_at BIGINT NOT NULL,
         UNIQUE (team, name)
       )`,
      `CREATE TABLE secret_versions (
         secret_id TEXT NOT NULL REFERENCES secrets(id) ON DELETE CASCADE,
         version BIGINT NOT NULL,
         sealed TEXT NOT NULL,
         created_at BIGINT NOT NULL,
         PRIMARY KEY (secret_id, version)
       )`,
    ],
  },
  {
    version: 6,
    name: "activity history: events (fleet-wide ids), audit entries, metric samples",
    statements: [
      `CREATE TABLE events (
         id BIGSERIAL PRIMARY KEY,
         time BIGINT NOT NULL,
         type TEXT NOT NULL,
         sandbox_id TEXT NOT NULL,
         body TEXT NOT NULL
       )`,
      "CREATE INDEX events_time ON events(time)",
      "CREATE INDEX events_sandbox ON events(sandbox_id, id)",
      `CREATE TABLE audit (
         id BIGSERIAL PRIMARY KEY,
         time BIGINT NOT NULL,
         actor TEXT NOT NULL,
         api TEXT NOT NULL,
         action TEXT NOT NULL,
         sandbox_id TEXT,
         result TEXT NOT NULL,
         body TEXT NOT NULL
       )`,
      "CREATE INDEX audit_time ON audit(time)",
      "CREATE INDEX audit_sandbox ON audit(sandbox_id, id)",
      `CREATE TABLE metric_samples (
         sandbox_id TEXT NOT NULL,
         time BIGINT NOT NULL,
         body TEXT NOT NULL,
         PRIMARY KEY (sandbox_id, time)
       )`,
      "CREATE INDEX metric_samples_time ON metric_samples(time)",
    ],
  },
];
