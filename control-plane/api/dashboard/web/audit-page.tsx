import { useState } from "preact/hooks";
import { readAudit, ws } from "./api";
import { useLoad } from "./load";
import { linkProps } from "./router";

interface Filters {
  actor: string;
  sandbox_id: string;
  action: string;
  since: string;
  until: string;
}

const EMPTY: Filters = { actor: "", sandbox_id: "", action: "", since: "", until: "" };
const SHOWN = 200;

/** The filters as the workspace API's GET /audit query (datetime-local fields are local times: sent as ISO). */
function query(f: Filters): string {
  const q = new URLSearchParams();
  for (const k of ["actor", "sandbox_id", "action"] as const) if (f[k].trim()) q.set(k, f[k].trim());
  for (const k of ["since", "until"] as const) if (f[k]) q.set(k, new Date(f[k]).toISOString());
  return q.toString();
}

/**
 * The audit log (workspace GET /audit): filters by key, sandbox, action and
 * time; the newest 200 matches shown; every match exported as CSV or JSON
 * Lines (the server streams the download).
 */
export function AuditPage() {
  const [draft, setDraft] = useState<Filters>(EMPTY);
  const [applied, setApplied] = useState<Filters>(EMPTY);
  const q = query(applied);
  const entries = useLoad(() => readAudit(`${q}${q ? "&" : ""}order=newest&limit=${SHOWN}`), [q]);
  const field = (k: keyof Filters, label: string, time = false) => {
    const props = { name: k, placeholder: label, "aria-label": label, value: draft[k], onInput: (e: Event) => setDraft({ ...draft, [k]: (e.target as HTMLInputElement).value }) };
    return time ? <input type="datetime-local" {...props} /> : <input type="text" {...props} />;
  };
  const exportUrl = (format: string) => ws(`/audit?${q}${q ? "&" : ""}format=${format}`);
  return (
    <section>
      <div class="row">
        <h3>
          Audit log <small class="muted">{entries.data ? `${entries.data.length}${entries.data.length === SHOWN ? "+ (the newest 200)" : ""}` : "loading…"}</small>
        </h3>
        <span class="actions">
          <a role="button" class="outline" href={exportUrl("csv")} download="locale2b-audit.csv" data-action="export-csv">
            Export CSV
          </a>
          <a role="button" class="outline" href={exportUrl("jsonl")} download="locale2b-audit.jsonl" data-action="export-jsonl">
            Export JSON Lines
          </a>
        </span>
      </div>
      <form
        class="filters audit-filters"
        onSubmit={(e) => {
          e.preventDefault();
          // The same filters again: the newest entries again.
          if (query(draft) === q) entries.reload();
          else setApplied(draft);
        }}
      >
        {field("actor", "key id (key_…)")}
        {field("sandbox_id", "sandbox id")}
        {field("action", "action contains")}
        {field("since", "since", true)}
        {field("until", "until", true)}
        <button type="submit" data-action="filter-audit">
          Filter
        </button>
        <button
          type="button"
          class="outline secondary"
          onClick={() => {
            setDraft(EMPTY);
            setApplied(EMPTY);
          }}
        >
          Clear
        </button>
      </form>
      {entries.error ? <p class="error">{entries.error}</p> : null}
      <div class="table-wrap">
        <table class="striped" data-testid="audit-entries">
          <thead>
            <tr>
              <th>Time</th>
              <th>Key</th>
              <th>API</th>
              <th>Action</th>
              <th>Sandbox</th>
              <th>Result</th>
              <th>Message</th>
            </tr>
          </thead>
          <tbody>
            {(entries.data ?? []).map((e) => (
              <tr key={e.id} data-audit-id={e.id} data-audit-action={e.action}>
                <td>{new Date(e.time).toLocaleString()}</td>
                <td>
                  <code>{e.actor}</code>
                </td>
                <td>{e.api}</td>
                <td>{e.action}</td>
                <td>{e.sandbox_id ? <a {...linkProps(`/dashboard/sandboxes/${e.sandbox_id}`)}>{e.sandbox_id}</a> : ""}</td>
                <td class={e.result === "ok" ? "ok" : "error"}>{e.status ?? e.result}</td>
                <td class="muted message">{e.message ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
