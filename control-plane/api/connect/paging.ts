// List pages: ListSandboxes with an opaque cursor (startedAt, id) over the
// store's order, so a page boundary stays put while sandboxes come and go;
// templates and their builds by the id that starts the next page.
import { Code, ConnectError } from "@connectrpc/connect";
import type { SandboxRecord } from "../../domain/sandbox.js";

export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1000;

interface Cursor {
  t: number;
  i: string;
}

function encode(r: SandboxRecord): string {
  return Buffer.from(JSON.stringify({ t: r.startedAt, i: r.id } satisfies Cursor)).toString("base64url");
}

function decode(token: string): Cursor {
  try {
    const c = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as Partial<Cursor>;
    if (typeof c.t === "number" && typeof c.i === "string") return { t: c.t, i: c.i };
  } catch {
    // reported below
  }
  throw new ConnectError("invalid page_token: pass next_page_token from the previous response", Code.InvalidArgument);
}

/** One page of `all` (sorted by startedAt, then id) and the token of the next, "" when none. */
export function page(all: SandboxRecord[], limit: number, token: string): { items: SandboxRecord[]; next: string } {
  const size = limit === 0 ? DEFAULT_PAGE_SIZE : Math.min(limit, MAX_PAGE_SIZE);
  let rest = all;
  if (token) {
    const c = decode(token);
    rest = all.filter((r) => r.startedAt > c.t || (r.startedAt === c.t && r.id > c.i));
  }
  const items = rest.slice(0, size);
  return { items, next: rest.length > size ? encode(items[items.length - 1]!) : "" };
}

/**
 * One page of a list whose items have ids and a fixed order (templates,
 * builds): the token names the first item of the next page, so a page stays
 * put while items are added at the end; one whose item is gone is refused.
 */
export function pageById<T>(all: T[], idOf: (item: T) => string, limit: number, token: string, what: string): { items: T[]; next: string } {
  const size = limit === 0 ? DEFAULT_PAGE_SIZE : Math.min(limit, MAX_PAGE_SIZE);
  let start = 0;
  if (token) {
    const id = Buffer.from(token, "base64url").toString("utf8");
    start = all.findIndex((item) => idOf(item) === id);
    if (start < 0) throw new ConnectError(`invalid page_token: pass next_page_token from the previous response (the ${what} it points at may be gone: start again from the first page)`, Code.InvalidArgument);
  }
  const items = all.slice(start, start + size);
  const next = all[start + size];
  return { items, next: next ? Buffer.from(idOf(next)).toString("base64url") : "" };
}
