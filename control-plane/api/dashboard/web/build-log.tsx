import { useEffect, useState } from "preact/hooks";
import { call, e2b } from "./api";

interface LogEntry {
  timestamp: string;
  level: string;
  message: string;
  step?: string;
}

interface BuildStatus {
  status: string;
  logEntries: LogEntry[];
  reason?: { message: string; step?: string };
}

const PAGE = 100;

/**
 * A build's log, live: E2B's GET /templates/{id}/builds/{build}/status with
 * logsOffset, a page at a time, once a second while the build runs (only
 * the lines not seen yet come back).
 */
export function BuildLog({ templateId, buildId, changed }: { templateId: string; buildId: string; changed?: (status: string) => void }) {
  const [lines, setLines] = useState<LogEntry[]>([]);
  const [status, setStatus] = useState("");
  const [reason, setReason] = useState("");
  const [error, setError] = useState("");
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let offset = 0;
    let last = "";
    setLines([]);
    const poll = async () => {
      try {
        const url = e2b(`/templates/${encodeURIComponent(templateId)}/builds/${encodeURIComponent(buildId)}/status?logsOffset=${offset}&limit=${PAGE}`);
        const s = await call<BuildStatus>("GET", url);
        if (stopped) return;
        offset += s.logEntries.length;
        if (s.logEntries.length) setLines((l) => [...l, ...s.logEntries]);
        setStatus(s.status);
        setReason(s.reason?.message ?? "");
        setError("");
        if (s.status !== last) changed?.(s.status);
        last = s.status;
        const running = s.status === "building" || s.status === "waiting";
        // A full page: more is waiting now. Else, while it runs, look again in a second.
        if (s.logEntries.length === PAGE) timer = setTimeout(() => void poll(), 0);
        else if (running) timer = setTimeout(() => void poll(), 1000);
      } catch (err) {
        if (stopped) return;
        setError((err as Error).message);
        timer = setTimeout(() => void poll(), 5000);
      }
    };
    void poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [templateId, buildId]);
  return (
    <article data-testid="build-log" data-build-status={status}>
      <header class="row">
        <span>
          Build <code>{buildId}</code> <span class={`state ${status}`}>{status || "…"}</span>
        </span>
        <small class="muted">{lines.length} lines</small>
      </header>
      {error ? <p class="error">{error}</p> : null}
      {reason ? <p class="error">{reason}</p> : null}
      <pre class="log">
        {lines.map((l, i) => (
          <div key={i} class={`level-${l.level}`}>
            <time>{new Date(l.timestamp).toLocaleTimeString()}</time> {l.step ? `[${l.step}] ` : ""}
            {l.message}
          </div>
        ))}
      </pre>
    </article>
  );
}
