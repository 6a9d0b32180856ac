/**
 * E2B's secrets: a named value kept for a team, write-only (no route ever
 * returns it), encrypted at rest, in versions (an update appends one; readers
 * get the current one). The egress proxy resolves `${e2b.secrets.<name>}` in
 * a header to the current value (secrets/placeholders.ts).
 */
export interface SecretRecord {
  /** `sec_` + lowercase alphanumerics. */
  id: string;
  /** Whose it is (this server has one team: TEAM). */
  team: string;
  /** Lower-cased, unique within the team. */
  name: string;
  currentVersion: number;
  metadata: Record<string, string>;
  /** ms since epoch */
  createdAt: number;
  updatedAt: number;
}

/** One stored value of a secret: AES-256-GCM, bound to its secret and version (secrets/cipher.ts). */
export interface SealedVersion {
  secretId: string;
  version: number;
  /** base64 of nonce ‖ ciphertext ‖ tag. */
  sealed: string;
  createdAt: number;
}

/** This server's one team (as templates and snapshots have one namespace). */
export const TEAM = "local";

export const SECRET_ID_PREFIX = "sec_";
export const SECRET_NAME = /^[a-zA-Z0-9_-]+$/;
export const SECRET_NAME_MAX = 128;
/** The largest value a secret holds, in bytes (UTF-8): a header value or a token, not a file. */
export const SECRET_VALUE_MAX_BYTES = 64 * 1024;
export const METADATA_MAX_ENTRIES = 32;
export const METADATA_KEY_MAX_BYTES = 128;
export const METADATA_VALUE_MAX_BYTES = 1024;
export const METADATA_MAX_BYTES = 8192;

/** Why `name` cannot name a secret, or undefined when it can. */
export function secretNameProblem(name: unknown): string | undefined {
  if (typeof name !== "string" || name === "") return "a secret needs a name: letters, digits, '_' and '-' (field 'name')";
  if (name.length > SECRET_NAME_MAX) return `secret name '${name.slice(0, 20)}…' is ${name.length} characters long: at most ${SECRET_NAME_MAX}`;
  if (!SECRET_NAME.test(name)) return `invalid secret name '${name}': use only letters, digits, '_' and '-' (E2B's pattern ^[a-zA-Z0-9_-]+$)`;
  if (name.toLowerCase().startsWith(SECRET_ID_PREFIX)) return `invalid secret name '${name}': the '${SECRET_ID_PREFIX}' prefix is reserved for secret ids`;
  return undefined;
}

/**
 * Why `value` cannot be a secret's value, or undefined when it can. The
 * message never quotes the value.
 */
export function secretValueProblem(value: unknown): string | undefined {
  if (value === undefined || value === null) return "field 'value' is required: the secret's value";
  if (typeof value !== "string") return `field 'value' must be a string, got ${Array.isArray(value) ? "an array" : typeof value}`;
  if (value === "") return "field 'value' must not be empty";
  const bytes = Buffer.byteLength(value);
  if (bytes > SECRET_VALUE_MAX_BYTES) return `field 'value' is ${bytes} bytes: a secret holds at most ${SECRET_VALUE_MAX_BYTES} bytes`;
  return undefined;
}

/** Why `metadata` is refused (E2B's SecretMetadata limits), or undefined. */
export function secretMetadataProblem(metadata: unknown): string | undefined {
  if (metadata === undefined || metadata === null) return undefined;
  if (typeof metadata !== "object" || Array.isArray(metadata)) return "field 'metadata' must be an object of strings";
  const entries = Object.entries(metadata);
  if (entries.length > METADATA_MAX_ENTRIES) return `field 'metadata' has ${entries.length} entries: at most ${METADATA_MAX_ENTRIES}`;
  let total = 0;
  for (const [k, v] of entries) {
    if (typeof v !== "string") return `field 'metadata.${k}' must be a string`;
    const kb = Buffer.byteLength(k);
    const vb = Buffer.byteLength(v);
    if (kb === 0) return "field 'metadata' has an empty key";
    if (kb > METADATA_KEY_MAX_BYTES) return `metadata key '${k.slice(0, 20)}…' is ${kb} bytes: at most ${METADATA_KEY_MAX_BYTES}`;
    if (vb > METADATA_VALUE_MAX_BYTES) return `metadata value of '${k}' is ${vb} bytes: at most ${METADATA_VALUE_MAX_BYTES}`;
    total += kb + vb;
  }
  if (total > METADATA_MAX_BYTES) return `field 'metadata' is ${total} bytes in all: at most ${METADATA_MAX_BYTES}`;
  return undefined;
}
