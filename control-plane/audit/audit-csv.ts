import type { AuditEntry } from "./audit-log.js";

/** The columns of the audit log as CSV, in order (details as JSON in the last one). */
export const AUDIT_CSV_HEADER = "id,time,actor,api,action,sandbox_id,result,status,message,duration_ms,details\r\n";

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, quote or line
 * break. A text that a spreadsheet would run as a formula (=, +, -, @, tab,
 * CR first: a command line from inside a sandbox can be anything) gets a
 * leading apostrophe.
 */
function field(v: unknown): string {
  if (v === undefined || v === null) return "";
  let s = typeof v === "string" ? v : typeof v === "number" ? String(v) : JSON.stringify(v);
  if (typeof v === "string" && /^[=+\-@\t\r]/.test(s)) s = `'${s}`;
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** An audit entry as one CSV record (with its CRLF). */
export function auditCsvRow(e: AuditEntry): string {
  return [e.id, e.time, e.actor, e.api, e.action, e.sandbox_id, e.result, e.status, e.message, e.duration_ms, e.details && Object.keys(e.details).length ? e.details : undefined].map(field).join(",") + "\r\n";
}
