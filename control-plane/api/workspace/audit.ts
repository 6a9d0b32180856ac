import type { AuditEntry } from "../../audit/audit-log.js";
import type { WsContext } from "./context.js";
import { WsError } from "./errors.js";
import { timeQuery } from "./metrics.js";

/**
 * GET /audit[?since=&until=&sandbox_id=&actor=&limit=]: the audit log as
 * JSON Lines (application/x-ndjson, one entry per line, oldest first),
 * streamed page by page with back-pressure. `locale2b audit export` is
 * this route.
 */
export async function exportAudit({ res, query, deps, signal }: WsContext): Promise<void> {
  const sinceMs = timeQuery(query, "since");
  const untilMs = timeQuery(query, "until");
  const rawLimit = query.get("limit");
  const limit = rawLimit ? Number(rawLimit) : Infinity;
  if (rawLimit && (!Number.isInteger(limit) || limit < 1)) throw new WsError(400, "invalid_request", `limit must be a positive whole number, got '${rawLimit}'`);
  const sandboxId = query.get("sandbox_id") || undefined;
  const actor = query.get("actor") || undefined;
  res.writeHead(200, { "content-type": "application/x-ndjson; charset=utf-8", "cache-control": "no-store" });
  let afterId = 0;
  let left = limit;
  while (left > 0 && !signal.aborted) {
    const page: AuditEntry[] = deps.audit.query({
      afterId,
      limit: Math.min(1000, left),
      ...(sinceMs !== undefined ? { sinceMs } : {}),
      ...(untilMs !== undefined ? { untilMs } : {}),
      ...(sandboxId ? { sandboxId } : {}),
      ...(actor ? { actor } : {}),
    });
    if (page.length === 0) break;
    const text = page.map((e) => JSON.stringify(e)).join("\n") + "\n";
    if (!res.write(text)) await new Promise((r) => (res.once("drain", r), res.once("close", r)));
    afterId = page.at(-1)!.id;
    left -= page.length;
    if (page.length < 1000) break;
  }
  res.end();
}
