import { createRequire } from "node:module";

/** @napi-rs/xattr, loaded on first use: a native addon envd's start-up need not wait for. */
let xattr: typeof import("@napi-rs/xattr") | undefined;
const lib = (): typeof import("@napi-rs/xattr") => (xattr ??= createRequire(import.meta.url)("@napi-rs/xattr") as typeof import("@napi-rs/xattr"));
const listAttributes = (path: string) => lib().listAttributes(path);
const getAttribute = (path: string, name: string) => lib().getAttribute(path, name);
const removeAttribute = (path: string, name: string) => lib().removeAttribute(path, name);
const setAttribute = (path: string, name: string, value: string) => lib().setAttribute(path, name, value);

/** Namespace of E2B file metadata: `X-Metadata-Foo: bar` is stored as `user.e2b.foo`. */
export const METADATA_PREFIX = "user.e2b.";

function isUnsupported(err: unknown): boolean {
  const msg = String((err as Error)?.message ?? err);
  return /not supported|ENOTSUP|EOPNOTSUPP|Operation not supported|No such attribute|ENODATA/i.test(msg);
}

/**
 * The file's `user.e2b.*` extended attributes with the prefix stripped; only
 * valid UTF-8 values are kept. A filesystem without user xattrs has none.
 */
export async function readMetadata(path: string): Promise<Record<string, string>> {
  let names: string[];
  try {
    names = await listAttributes(path);
  } catch (err) {
    if (isUnsupported(err)) return {};
    throw err;
  }
  const out: Record<string, string> = {};
  for (const name of names) {
    if (!name.startsWith(METADATA_PREFIX)) continue;
    try {
      const value = await getAttribute(path, name);
      if (!value) continue;
      const text = new TextDecoder("utf-8", { fatal: true }).decode(value);
      out[name.slice(METADATA_PREFIX.length)] = text;
    } catch {
      // vanished or not UTF-8: skipped, as envd does
    }
  }
  return out;
}

/**
 * Replaces the file's metadata set with `metadata` (keys lowercased): old
 * `user.e2b.*` attributes not in it are removed. An empty map clears it.
 */
export async function replaceMetadata(path: string, metadata: Record<string, string>): Promise<void> {
  let existing: string[] = [];
  try {
    existing = (await listAttributes(path)).filter((n) => n.startsWith(METADATA_PREFIX));
  } catch (err) {
    if (!isUnsupported(err)) throw err;
    if (Object.keys(metadata).length === 0) return;
    throw new Error(`cannot store file metadata: the filesystem of '${path}' does not support user extended attributes`);
  }
  const wanted = new Map(Object.entries(metadata).map(([k, v]) => [METADATA_PREFIX + k.toLowerCase(), v]));
  for (const name of existing) {
    if (!wanted.has(name)) await removeAttribute(path, name).catch(() => undefined);
  }
  for (const [name, value] of wanted) {
    await setAttribute(path, name, value);
  }
}
