// AES-256-GCM for secret values: a fresh 96-bit nonce per value, and the
// secret's id and version as associated data, so a sealed value copied onto
// another secret's row (or another version) does not open.
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";

const NONCE_BYTES = 12;
const TAG_BYTES = 16;

function aad(secretId: string, version: number): Buffer {
  return Buffer.from(`locale2b-secret\0${secretId}\0${version}`);
}

/** base64 of nonce ‖ ciphertext ‖ tag. */
export function seal(key: Buffer, secretId: string, version: number, value: string): string {
  const nonce = randomBytes(NONCE_BYTES);
  const c = createCipheriv("aes-256-gcm", key, nonce, { authTagLength: TAG_BYTES });
  c.setAAD(aad(secretId, version));
  const body = Buffer.concat([c.update(value, "utf8"), c.final()]);
  return Buffer.concat([nonce, body, c.getAuthTag()]).toString("base64");
}

/** The value; throws when the key, the secret or the version is not the one it was sealed with. */
export function open(key: Buffer, secretId: string, version: number, sealed: string): string {
  const raw = Buffer.from(sealed, "base64");
  if (raw.length < NONCE_BYTES + TAG_BYTES) throw new Error("sealed value is truncated");
  const d = createDecipheriv("aes-256-gcm", key, raw.subarray(0, NONCE_BYTES), { authTagLength: TAG_BYTES });
  d.setAAD(aad(secretId, version));
  d.setAuthTag(raw.subarray(raw.length - TAG_BYTES));
  return Buffer.concat([d.update(raw.subarray(NONCE_BYTES, raw.length - TAG_BYTES)), d.final()]).toString("utf8");
}

/** What the store keeps to recognise the key (never the key): servers with another key are refused. */
export function keyCheck(key: Buffer): string {
  return createHmac("sha256", key).update("locale2b secrets key check v1").digest("hex");
}
