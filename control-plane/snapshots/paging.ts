// Pages of the snapshot list (REST's X-Next-Token, Connect's page_token): an
// opaque cursor, the sort key of the last snapshot handed out, over the
// store's order (newest first), so a page boundary stays put while
// snapshots come and go.
import { ControlPlaneError } from "../domain/errors.js";
import type { SnapshotRecord } from "../domain/snapshot.js";

type Cursor = [createdAt: number, id: string, tag: string];

function encode(s: SnapshotRecord): string {
  return Buffer.from(JSON.stringify([s.createdAt, s.id, s.tag] satisfies Cursor)).toString("base64url");
}

function decode(token: string): Cursor {
  try {
    const v = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as unknown;
    if (Array.isArray(v) && v.length === 3 && typeof v[0] === "number" && typeof v[1] === "string" && typeof v[2] === "string") {
      return v as Cursor;
    }
  } catch {
    // below
  }
  throw new ControlPlaneError("invalid", `invalid page token '${token}': pass the one the previous page came with`);
}

/** Newest first: createdAt, then id, then tag, all descending. */
function after(s: SnapshotRecord, [createdAt, id, tag]: Cursor): boolean {
  if (s.createdAt !== createdAt) return s.createdAt < createdAt;
  if (s.id !== id) return s.id < id;
  return s.tag < tag;
}

/** One page of `all` (in the store's order) after `token`, and the next page's token ("" when none). */
export function pageSnapshots(all: SnapshotRecord[], limit: number, token: string | undefined): { items: SnapshotRecord[]; next: string } {
  const cursor = token ? decode(token) : undefined;
  const rest = cursor ? all.filter((s) => after(s, cursor)) : all;
  const items = rest.slice(0, limit);
  return { items, next: rest.length > limit ? encode(items[items.length - 1]!) : "" };
}
