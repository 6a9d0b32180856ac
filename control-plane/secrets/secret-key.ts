// The key secret values are encrypted under: never in the database. Either
// given (LOCALE2B_SECRETS_KEY: a fleet's replicas and nodes must all have the
// same) or a key file (LOCALE2B_SECRETS_KEY_FILE, default <data dir>/secrets.key)
// made with mode 0600 the first time a secret needs it.
import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, linkSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";

export const KEY_BYTES = 32;
export const KEY_FILE_NAME = "secrets.key";

/** Where a key comes from: the env setting's value, a file, or nowhere (why, and what to do). */
export type KeySource = { value: string } | { file: string } | { missing: string };

export const SHARED_KEY_MISSING =
  "set LOCALE2B_SECRETS_KEY (make one with: openssl rand -base64 32): servers that share a Postgres store (a fleet's API replicas and nodes) must all have the same key";

/**
 * The env key, else the key file (default: in the data dir). A server on a
 * shared store (Postgres) has no key file unless one is named: each host
 * would make its own, and another's values would not open.
 */
export function keySource(dataDir: string | undefined, env: { key?: string; file?: string }): KeySource {
  if (env.key !== undefined) return { value: env.key };
  if (env.file !== undefined) return { file: env.file };
  return dataDir !== undefined ? { file: join(dataDir, KEY_FILE_NAME) } : { missing: SHARED_KEY_MISSING };
}

/** A key written as 64 hex digits or as base64 (44 characters) of 32 bytes. */
export function parseKey(text: string, where: string): Buffer {
  const t = text.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, "hex") : /^[A-Za-z0-9+/]{43}=$/.test(t) ? Buffer.from(t, "base64") : undefined;
  if (!key || key.length !== KEY_BYTES) {
    throw new Error(`${where} is not a secrets key: expected ${KEY_BYTES} bytes as 64 hex digits or 44 base64 characters (make one with: openssl rand -base64 32)`);
  }
  return key;
}

/**
 * The key from `source`. A key file that does not exist is created (mode
 * 0600, atomically: two servers starting together read the same key); one
 * that others than its owner may read is refused.
 */
export function loadKey(source: KeySource): { key: Buffer; created: boolean } {
  if ("missing" in source) throw new Error(source.missing);
  if ("value" in source) return { key: parseKey(source.value, "LOCALE2B_SECRETS_KEY"), created: false };
  const file = source.file;
  let created = false;
  try {
    statSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    created = createKeyFile(file);
  }
  const st = statSync(file);
  if (!st.isFile()) throw new Error(`the secrets key file ${file} is not a regular file`);
  if (st.mode & 0o077) throw new Error(`the secrets key file ${file} may be read by others (mode ${(st.mode & 0o777).toString(8)}): chmod 600 it`);
  return { key: parseKey(readFileSync(file, "utf8"), `the secrets key file ${file}`), created };
}

/** Writes a new key beside `file` and links it into place; false when another process got there first. */
function createKeyFile(file: string): boolean {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  const fd = openSync(tmp, "wx", 0o600);
  try {
    writeSync(fd, `${randomBytes(KEY_BYTES).toString("base64")}\n`);
  } finally {
    closeSync(fd);
  }
  chmodSync(tmp, 0o600); // whatever the umask
  try {
    linkSync(tmp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  } finally {
    rmSync(tmp, { force: true });
  }
}
