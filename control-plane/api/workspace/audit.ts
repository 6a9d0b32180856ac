import { AUDIT_CSV_HEADER, auditCsvRow } from "../../audit/audit-csv.js";
import type { AuditEntry, AuditLog } from "../../audit/audit-log.js";
import type { WsContext } from "./context.js";
import { WsError } from "./errors.js";
import { timeQuery } from "./metrics.js";

/**
 * GET /audit[?since=&until=&sandbox_id=&actor=&action=&limit=&format=&order=]:
 * the audit log as JSON Lines (application/x-ndjson, one entry per line, oldest
 * first; `order=newest`: newest first), or with `format=csv` as CSV (a download: text/csv, attachment),
 * streamed page by page with back-pressure. `action` keeps the entries whose
 * action contains it. `locale2b audit export` is this route.
 */
export async function exportAudit({ res, query, deps, signal }: Pick<WsContext, "res" | "query" | "signal"> & { deps: { audit: Pick<AuditLog, "query"> } }): Promise<void> {
  const sinceMs = timeQuery(query, "since");
  const untilMs = timeQuery(query, "until");
  const rawLimit = query.get("limit");
  const limit = rawLimit ? Number(rawLimit) : Infinity;
  if (rawLimit && (!Number.isInteger(limit) || limit < 1)) throw new WsError(400, "invalid_request", `limit must be a positive whole number, got '${rawLimit}'`);
  const sandboxId = query.get("sandbox_id") || undefined;
  const actor = query.get("actor") || undefined;
  const action = query.get("action") || undefined;
  const format = query.get("format") || "jsonl";
  if (format !== "jsonl" && format !== "csv") throw new WsError(400, "invalid_request", `format must be jsonl (JSON Lines, the default) or csv, got '${format}'`);
  const csv = format === "csv";
  const order = query.get("order") || "oldest";
  if (order !== "oldest" && order !== "newest") throw new WsError(400, "invalid_request", `order must be oldest (the default) or newest, got '${order}'`);
  const newestFirst = order === "newest";
  res.writeHead(
    200,
    csv
      ? { "content-type": "text/csv; charset=utf-8", "content-disposition": 'attachment; filename="locale2b-audit.csv"', "cache-control": "no-store" }
      : { "content-type": "application/x-ndjson; charset=utf-8", "cache-control": "no-store" },
  );
  if (csv) res.write(AUDIT_CSV_HEADER);
  let afterId = 0;
  let beforeId = 0;
  let left = limit;
  while (left > 0 && !signal.aborted) {
    const page: AuditEntry[] = await deps.audit.query({
      ...(newestFirst ? { beforeId, newestFirst } : { afterId }),
      limit: Math.min(1000, left),
      ...(sinceMs !== undefined ? { sinceMs } : {}),
      ...(untilMs !== undefined ? { untilMs } : {}),
      ...(sandboxId ? { sandboxId } : {}),
      ...(actor ? { actor } : {}),
      ...(action ? { action } : {}),
    });
    if (page.length === 0) break;
    const text = csv ? page.map(auditCsvRow).join("") : page.map((e) => JSON.stringify(e)).join("\n") + "\n";
    if (!res.write(text)) await new Promise((r) => (res.once("drain", r), res.once("close", r)));
    if (newestFirst) beforeId = page.at(-1)!.id;
    else afterId = page.at(-1)!.id;
    left -= page.length;
    if (page.length < 1000) break;
  }
  res.end();
}
