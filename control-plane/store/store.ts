import type { ListFilter, SandboxRecord } from "../domain/sandbox.js";
import type { SnapshotFilter, SnapshotRecord } from "../domain/snapshot.js";
import type { NodeRecord } from "../domain/node.js";
import type { TemplateBuildRecord, TemplateRecord, TemplateTagRecord } from "../domain/template.js";
import type { VolumeRecord } from "../domain/volume.js";
import type { SealedVersion, SecretRecord } from "../domain/secret.js";

export interface ApiKeyInfo {
  id: string;
  name: string;
  /** The first characters of the key, e.g. `e2b_1a2b…`, for display only. */
  mask: string;
  createdAt: number;
  lastUsedAt?: number;
}

/**
 * Durable control-plane state: sandboxes (with metadata), API keys (hashes
 * only), snapshots, and templates with their builds and tags. SqliteStore
 * keeps it in a file under the data dir (one box); PgStore in Postgres (a
 * fleet). Every write is committed before its promise resolves, so a crash
 * loses nothing that was acknowledged.
 */
export interface Store {
  putSandbox(record: SandboxRecord): Promise<void>;
  getSandbox(id: string): Promise<SandboxRecord | undefined>;
  /** Sorted by startedAt ascending (then id). */
  listSandboxes(filter?: ListFilter): Promise<SandboxRecord[]>;
  deleteSandbox(id: string): Promise<void>;

  /** Creates `e2b_` + 40 hex, stores its hash, returns the key itself (shown once). */
  createApiKey(name: string): Promise<{ key: string; info: ApiKeyInfo }>;
  /** Stores the hash of a key given from outside (LOCALE2B_API_KEY); idempotent. */
  importApiKey(key: string, name: string): Promise<ApiKeyInfo>;
  /** The key's info when it is valid (constant-time hash lookup), else undefined. */
  verifyApiKey(key: string): Promise<ApiKeyInfo | undefined>;
  listApiKeys(): Promise<ApiKeyInfo[]>;
  /** Revokes by id or by the full key; false when nothing matched. */
  revokeApiKey(idOrKey: string): Promise<boolean>;

  /** Inserts or replaces the snapshot (id, tag). */
  putSnapshot(record: SnapshotRecord): Promise<void>;
  getSnapshot(id: string, tag: string): Promise<SnapshotRecord | undefined>;
  /** Newest first (createdAt, then id and tag descending). */
  listSnapshots(filter?: SnapshotFilter): Promise<SnapshotRecord[]>;
  deleteSnapshot(id: string, tag: string): Promise<boolean>;

  /** Inserts or replaces a template; its names must not belong to another template (the caller checks). */
  putTemplate(record: TemplateRecord): Promise<void>;
  getTemplate(id: string): Promise<TemplateRecord | undefined>;
  /** The template one of whose names is `name`. */
  templateByName(name: string): Promise<TemplateRecord | undefined>;
  /** Oldest first. */
  listTemplates(): Promise<TemplateRecord[]>;
  /** The template, its names, builds and tags; false when there was none. */
  deleteTemplate(id: string): Promise<boolean>;

  putTemplateBuild(record: TemplateBuildRecord): Promise<void>;
  getTemplateBuild(id: string): Promise<TemplateBuildRecord | undefined>;
  /** Newest first; every template's when `templateId` is absent. */
  listTemplateBuilds(templateId?: string): Promise<TemplateBuildRecord[]>;
  deleteTemplateBuild(id: string): Promise<void>;

  /** Points a template's tag at a build (replacing where it pointed). */
  putTemplateTag(record: TemplateTagRecord): Promise<void>;
  getTemplateTag(templateId: string, tag: string): Promise<TemplateTagRecord | undefined>;
  listTemplateTags(templateId: string): Promise<TemplateTagRecord[]>;
  deleteTemplateTag(templateId: string, tag: string): Promise<boolean>;

  /** A fleet's hosts (`locale2b node`), each as its last heartbeat wrote it. */
  putNode(record: NodeRecord): Promise<void>;
  getNode(name: string): Promise<NodeRecord | undefined>;
  /** By name. */
  listNodes(): Promise<NodeRecord[]>;
  /** Cordons or readies a node; a heartbeat (putNode) never changes its state. False when there is no such node. */
  setNodeState(name: string, state: NodeRecord["state"]): Promise<boolean>;
  deleteNode(name: string): Promise<boolean>;
  /** Per node, its sandboxes that are not killed and the memory they were given (MiB), as the store has them now. */
  nodeLoads(): Promise<{ node: string; sandboxes: number; memoryMB: number; cpus: number }[]>;

  /** Inserts a volume; false (nothing written) when its name is taken. */
  addVolume(record: VolumeRecord): Promise<boolean>;
  getVolume(id: string): Promise<VolumeRecord | undefined>;
  volumeByName(name: string): Promise<VolumeRecord | undefined>;
  /** Oldest first (then by id). */
  listVolumes(): Promise<VolumeRecord[]>;
  deleteVolume(id: string): Promise<boolean>;

  /** Inserts a secret and its first version; false (nothing written) when its name is taken in its team. */
  addSecret(record: SecretRecord, first: SealedVersion): Promise<boolean>;
  /** A team's secret by id or by (lower-case) name. */
  getSecret(team: string, idOrName: string): Promise<SecretRecord | undefined>;
  /** A team's secrets by name, those after `after` (a name) when given, at most `limit`. */
  listSecrets(team: string, opts: { after?: string; limit: number }): Promise<SecretRecord[]>;
  /**
   * Appends a version (its value sealed by `seal` for the number it gets),
   * makes it current and, when given, replaces the metadata; undefined when
   * the team has no such secret. Concurrent updates each get their own number.
   */
  addSecretVersion(team: string, id: string, seal: (version: number) => string, metadata: Record<string, string> | undefined, now: number): Promise<SecretRecord | undefined>;
  /** A secret (by name) with its current version's sealed value. */
  currentSecret(team: string, name: string): Promise<{ record: SecretRecord; version: SealedVersion } | undefined>;
  /** The secret and all its versions; false when the team had no such secret. */
  deleteSecret(team: string, id: string): Promise<boolean>;

  /** Small server settings (e.g. the token seed), kept across restarts. */
  getSetting(key: string): Promise<string | undefined>;
  setSetting(key: string, value: string): Promise<void>;
  /** Stores `value` unless the key has one; resolves to the value the key holds (servers starting together agree). */
  initSetting(key: string, value: string): Promise<string>;
  /** The schema versions applied, oldest first. */
  schemaVersions(): Promise<number[]>;

  close(): Promise<void>;
}
