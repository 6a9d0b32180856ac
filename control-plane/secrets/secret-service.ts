// Secrets: their records (the store), their values sealed under a key the
// server keeps outside the database (secret-key.ts), read back only by
// resolve (for the egress proxy), never by an API route. Logs and audit
// entries carry a secret's id, name and version, never its value.
import type { Logger } from "pino";
import { ControlPlaneError } from "../domain/errors.js";
import { SECRET_ID_PREFIX, secretMetadataProblem, secretNameProblem, secretValueProblem, type SecretRecord } from "../domain/secret.js";
import { randomId } from "../manager/ids.js";
import type { Store } from "../store/store.js";
import { keyCheck, open, seal } from "./cipher.js";
import { loadKey, type KeySource } from "./secret-key.js";

export interface SecretServiceOptions {
  store: Store;
  key: KeySource;
  log: Logger;
}

/** The store setting that recognises the key (an HMAC of it, never the key). */
const KEY_CHECK_SETTING = "secrets_key_check";

export class SecretService {
  private key: Buffer | undefined;

  constructor(private readonly o: SecretServiceOptions) {}

  /**
   * The key, loaded (or its file created) at first use, and checked against
   * the one the store's secrets were sealed with: a server with another key
   * (a lost key file, a fleet member without the shared key) is refused
   * rather than writing values nobody else can read.
   */
  private async sealingKey(): Promise<Buffer> {
    if (this.key) return this.key;
    let loaded: { key: Buffer; created: boolean };
    try {
      loaded = loadKey(this.o.key);
    } catch (err) {
      throw new ControlPlaneError("unavailable", `secrets are not available: ${(err as Error).message}`);
    }
    const where = "file" in this.o.key ? `the key file ${this.o.key.file}` : "LOCALE2B_SECRETS_KEY";
    if (loaded.created) this.o.log.info({ keyFile: "file" in this.o.key ? this.o.key.file : undefined }, "secrets key file created (mode 0600): back it up, secrets cannot be read without it");
    const check = keyCheck(loaded.key);
    const stored = await this.o.store.initSetting(KEY_CHECK_SETTING, check);
    if (stored !== check) {
      throw new ControlPlaneError(
        "unavailable",
        `secrets are not available: this server's secrets key (${where}) is not the one the stored secrets were sealed with; give it the original key (every API replica and node of a fleet needs the same LOCALE2B_SECRETS_KEY). Without it the stored values cannot be read`,
      );
    }
    this.key = loaded.key;
    return loaded.key;
  }

  async create(team: string, name: unknown, value: unknown, metadata: unknown): Promise<SecretRecord> {
    const problem = secretNameProblem(name) ?? secretValueProblem(value) ?? secretMetadataProblem(metadata);
    if (problem) throw new ControlPlaneError("invalid", problem);
    const key = await this.sealingKey();
    const canonical = (name as string).toLowerCase();
    const now = Date.now();
    const rec: SecretRecord = { id: `${SECRET_ID_PREFIX}${randomId(20)}`, team, name: canonical, currentVersion: 1, metadata: { ...((metadata as Record<string, string> | undefined) ?? {}) }, createdAt: now, updatedAt: now };
    const added = await this.o.store.addSecret(rec, { secretId: rec.id, version: 1, sealed: seal(key, rec.id, 1, value as string), createdAt: now });
    if (!added) throw new ControlPlaneError("conflict", `a secret named '${canonical}' exists: update it (POST /secrets/${canonical}), or pick another name`);
    this.o.log.info({ secretId: rec.id, name: rec.name, version: 1 }, "secret created");
    return rec;
  }

  /** By id (`sec_…`) or name (any case: names are kept lower-case). */
  async get(team: string, ref: string): Promise<SecretRecord> {
    const rec = await this.o.store.getSecret(team, ref.startsWith(SECRET_ID_PREFIX) ? ref : ref.toLowerCase());
    if (!rec) throw new ControlPlaneError("not_found", `secret '${ref}' not found: list them with GET /secrets`);
    return rec;
  }

  /** A page by name; `after` is the last name of the page before. */
  list(team: string, limit: number, after?: string): Promise<SecretRecord[]> {
    return this.o.store.listSecrets(team, { limit, ...(after !== undefined ? { after } : {}) });
  }

  /** Stores `value` as the secret's next version (and replaces its metadata when given). */
  async update(team: string, ref: string, value: unknown, metadata: unknown): Promise<SecretRecord> {
    const problem = secretValueProblem(value) ?? secretMetadataProblem(metadata);
    if (problem) throw new ControlPlaneError("invalid", problem);
    const rec = await this.get(team, ref);
    const key = await this.sealingKey();
    const updated = await this.o.store.addSecretVersion(team, rec.id, (v) => seal(key, rec.id, v, value as string), metadata as Record<string, string> | undefined, Date.now());
    if (!updated) throw new ControlPlaneError("not_found", `secret '${ref}' not found: it was deleted meanwhile`);
    this.o.log.info({ secretId: updated.id, name: updated.name, version: updated.currentVersion }, "secret updated");
    return updated;
  }

  async delete(team: string, ref: string): Promise<SecretRecord> {
    const rec = await this.get(team, ref);
    if (!(await this.o.store.deleteSecret(team, rec.id))) throw new ControlPlaneError("not_found", `secret '${ref}' not found`);
    this.o.log.info({ secretId: rec.id, name: rec.name, version: rec.currentVersion }, "secret deleted");
    return rec;
  }

  /** The current value of the team's secret `name`, with its version (for placeholders.ts only: no route returns it). */
  async reveal(team: string, name: string): Promise<{ record: SecretRecord; value: string } | undefined> {
    const found = await this.o.store.currentSecret(team, name.toLowerCase());
    if (!found) return undefined;
    const key = await this.sealingKey();
    try {
      return { record: found.record, value: open(key, found.record.id, found.version.version, found.version.sealed) };
    } catch {
      throw new ControlPlaneError("internal", `secret '${found.record.name}' version ${found.version.version} cannot be decrypted: its stored value was changed or sealed under another key`);
    }
  }
}
