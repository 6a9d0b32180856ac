/**
 * File names are bytes, and not every name is valid UTF-8. To list and
 * watch such names (as E2B's envd does, so that nothing can hide from a
 * client), envd works on paths as "byte strings" (one character per byte,
 * latin1) or Buffers, and turns them into UTF-8 text only for the wire, where
 * invalid sequences become U+FFFD.
 */

/** The byte string of a UTF-8 path (a path from a request). */
export function byteString(utf8: string): string {
  return Buffer.from(utf8, "utf8").toString("latin1");
}

/** A byte string as the Buffer the fs functions take (they would encode a string as UTF-8). */
export function fsPath(bytes: string): Buffer {
  return Buffer.from(bytes, "latin1");
}

/** A name or path as it goes on the wire: UTF-8, invalid sequences as U+FFFD. */
export function shown(bytes: string | Buffer): string {
  return (typeof bytes === "string" ? fsPath(bytes) : bytes).toString("utf8");
}

/** A Buffer path as a string when it is valid UTF-8 (for APIs that take only strings), else undefined. */
export function utf8Path(path: Buffer): string | undefined {
  const text = path.toString("utf8");
  return Buffer.from(text, "utf8").equals(path) ? text : undefined;
}
