import { useEffect, useState } from "preact/hooks";
import { ws } from "./api";

interface SandboxEvent {
  id: number;
  event_type: string;
  timestamp: string;
  command?: string;
  exit_code?: number;
  path?: string;
  reason?: string;
  error?: string;
}

function summary(e: SandboxEvent): string {
  if (e.command !== undefined) return e.exit_code !== undefined ? `${e.command} → exit ${e.exit_code}` : e.command;
  return e.path ?? e.reason ?? e.error ?? "";
}

/** The sandbox's events as they happen: the workspace API's event stream (server-sent events), newest first. */
export function EventLog({ sandboxId }: { sandboxId: string }) {
  const [events, setEvents] = useState<SandboxEvent[]>([]);
  const [live, setLive] = useState(false);
  useEffect(() => {
    // The last hour's events first (the stream replays from since_id), then live ones; EventSource reconnects with Last-Event-ID.
    const es = new EventSource(ws(`/events/stream?sandbox_id=${encodeURIComponent(sandboxId)}&since_id=0`));
    const add = (m: MessageEvent) => {
      const e = JSON.parse(m.data) as SandboxEvent;
      setEvents((old) => (old.some((o) => o.id === e.id) ? old : [e, ...old].slice(0, 300)));
    };
    for (const t of ["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.destroyed", "exec.started", "exec.completed", "exec.failed", "file.read", "file.written", "file.mkdir", "file.move", "file.remove", "network.request"]) {
      es.addEventListener(t, add);
    }
    es.addEventListener("subscribed", () => setLive(true));
    es.onerror = () => setLive(false);
    return () => es.close();
  }, [sandboxId]);
  return (
    <article>
      <header>
        Events <small class={live ? "ok" : "muted"}>{live ? "● live" : "○ connecting"}</small>
      </header>
      <div class="events" data-testid="events">
        {events.length === 0 ? <p class="muted">No events yet.</p> : null}
        {events.map((e) => (
          <div class="event" key={e.id} data-event-type={e.event_type}>
            <time>{new Date(e.timestamp).toLocaleTimeString()}</time> <code>{e.event_type}</code> <span>{summary(e)}</span>
          </div>
        ))}
      </div>
    </article>
  );
}
