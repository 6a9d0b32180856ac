import { useEffect, useState } from "preact/hooks";
import { call, ws } from "./api";

interface AuditEntry {
  id: number;
  time: string;
  actor: string;
  api: string;
  action: string;
  result: "ok" | "error";
  status?: number;
  message?: string;
}

/** The sandbox's audit entries (workspace GET /audit?sandbox_id=, JSON Lines), newest first. */
export function AuditLog({ sandboxId, since }: { sandboxId: string; since: string }) {
  const [entries, setEntries] = useState<AuditEntry[] | undefined>();
  const [error, setError] = useState("");
  const [version, setVersion] = useState(0);
  useEffect(() => {
    let stopped = false;
    call<string | AuditEntry>("GET", ws(`/audit?sandbox_id=${encodeURIComponent(sandboxId)}&since=${encodeURIComponent(since)}&limit=5000`)).then(
      (text) => {
        if (stopped) return;
        // One entry is parsed as JSON by call(); several are JSON Lines text.
        const lines = typeof text === "string" ? text.split("\n").filter(Boolean).map((l) => JSON.parse(l) as AuditEntry) : text ? [text] : [];
        setEntries(lines.reverse().slice(0, 100));
      },
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
