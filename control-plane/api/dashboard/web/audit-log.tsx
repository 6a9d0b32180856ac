import { useEffect, useState } from "preact/hooks";
import { readAudit, type AuditEntry } from "./api";

/** The sandbox's audit entries (workspace GET /audit?sandbox_id=, JSON Lines), newest first. */
export function AuditLog({ sandboxId, since }: { sandboxId: string; since: string }) {
  const [entries, setEntries] = useState<AuditEntry[] | undefined>();
  const [error, setError] = useState("");
  const [version, setVersion] = useState(0);
  useEffect(() => {
    let stopped = false;
    readAudit(`sandbox_id=${encodeURIComponent(sandboxId)}&since=${encodeURIComponent(since)}&order=newest&limit=100`).then(
      (lines) => !stopped && setEntries(lines),
      (err: unknown) => !stopped && setError((err as Error).message),
    );
    return () => {
      stopped = true;
    };
  }, [sandboxId, since, version]);
  return (
    <article data-testid="audit">
      <header class="row">
        <span>Audit log</span>
        <button class="outline" onClick={() => setVersion((v) => v + 1)}>
          Refresh
        </button>
      </header>
      {error ? <p class="error">{error}</p> : null}
      <div class="events">
        {(entries ?? []).map((e) => (
          <div class="event" key={e.id} data-audit-action={e.action}>
            <time>{new Date(e.time).toLocaleTimeString()}</time> <code>{e.actor}</code> {e.api} <b>{e.action}</b>{" "}
            <span class={e.result === "ok" ? "ok" : "error"}>{e.status ?? e.result}</span> {e.message ? <small class="muted">{e.message}</small> : null}
          </div>
        ))}
      </div>
    </article>
  );
}
