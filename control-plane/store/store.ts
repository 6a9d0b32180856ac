import type { ListFilter, SandboxRecord } from "../domain/sandbox.js";
import type { SnapshotFilter, SnapshotRecord } from "../domain/snapshot.js";
import type { TemplateBuildRecord, TemplateRecord, TemplateTagRecord } from "../domain/template.js";

export interface ApiKeyInfo {
  id: string;
  name: string;
  /** The first characters of the key, e.g. `e2b_1a2b…`, for display only. */
  mask: string;
  createdAt: number;
  lastUsedAt?: number;
}

/**
 * Durable control-plane state in SQLite under the data dir: sandboxes (with
 * metadata), API keys (hashes only), snapshots, and templates with their
 * builds and tags. Every write is committed
 * before the call returns, so a crash loses nothing that was acknowledged.
 */
export interface Store {
  putSandbox(record: SandboxRecord): void;
  getSandbox(id: string): SandboxRecord | undefined;
  /** Sorted by startedAt ascending (then id). */
  listSandboxes(filter?: ListFilter): SandboxRecord[];
  deleteSandbox(id: string): void;

  /** Creates `e2b_` + 40 hex, stores its hash, returns the key itself (shown once). */
  createApiKey(name: string): { key: string; info: ApiKeyInfo };
  /** Stores the hash of a key given from outside (LOCALE2B_API_KEY); idempotent. */
  importApiKey(key: string, name: string): ApiKeyInfo;
  /** The key's info when it is valid (constant-time hash lookup), else undefined. */
  verifyApiKey(key: string): ApiKeyInfo | undefined;
  listApiKeys(): ApiKeyInfo[];
  /** Revokes by id or by the full key; false when nothing matched. */
  revokeApiKey(idOrKey: string): boolean;

  /** Inserts or replaces the snapshot (id, tag). */
  putSnapshot(record: SnapshotRecord): void;
  getSnapshot(id: string, tag: string): SnapshotRecord | undefined;
  /** Newest first (createdAt, then id and tag descending). */
  listSnapshots(filter?: SnapshotFilter): SnapshotRecord[];
  deleteSnapshot(id: string, tag: string): boolean;

  /** Inserts or replaces a template; its names must not belong to another template (the caller checks). */
  putTemplate(record: TemplateRecord): void;
  getTemplate(id: string): TemplateRecord | undefined;
  /** The template one of whose names is `name`. */
  templateByName(name: string): TemplateRecord | undefined;
  /** Oldest first. */
  listTemplates(): TemplateRecord[];
  /** The template, its names, builds and tags; false when there was none. */
  deleteTemplate(id: string): boolean;

  putTemplateBuild(record: TemplateBuildRecord): void;
  getTemplateBuild(id: string): TemplateBuildRecord | undefined;
  /** Newest first; every template's when `templateId` is absent. */
  listTemplateBuilds(templateId?: string): TemplateBuildRecord[];
  deleteTemplateBuild(id: string): void;

  /** Points a template's tag at a build (replacing where it pointed). */
  putTemplateTag(record: TemplateTagRecord): void;
  getTemplateTag(templateId: string, tag: string): TemplateTagRecord | undefined;
  listTemplateTags(templateId: string): TemplateTagRecord[];
  deleteTemplateTag(templateId: string, tag: string): boolean;

  /** Small server settings (e.g. the token seed), kept across restarts. */
  getSetting(key: string): string | undefined;
  setSetting(key: string, value: string): void;

  close(): void;
}
