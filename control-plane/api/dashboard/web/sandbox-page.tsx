import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, call, ws, type SandboxInfo } from "./api";
import { duration } from "./format";
import { AuditLog } from "./audit-log";
import { EventLog } from "./event-log";
import { FileBrowser } from "./file-browser";
import { loadSeries, type Series } from "./metrics";
import { ProcessList } from "./process-list";
import { linkProps } from "./router";
import { SandboxActions } from "./sandbox-actions";
import { TerminalView } from "./terminal";
import { TimeChart } from "./time-chart";

const MINUTES = 15;

/** One sandbox: what it is, its CPU and memory over the last minutes, its events live, and a terminal. */
export function SandboxPage({ id }: { id: string }) {
  const [info, setInfo] = useState<SandboxInfo | undefined>();
  const [gone, setGone] = useState(false);
  const [error, setError] = useState("");
  const [series, setSeries] = useState<Series | undefined>();
  const reload = useRef<() => void>(() => undefined);

  useEffect(() => {
    let stopped = false;
    let current: Series | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const s = await call<SandboxInfo>("GET", ws(`/sandboxes/${id}`));
        if (stopped) return;
        setInfo(s);
        setError("");
        const r = await loadSeries(id, current, MINUTES);
        current = r.series;
        if (!stopped) setSeries(r.series);
        timer = setTimeout(() => void load(), Math.max(1000, r.interval * 1000));
      } catch (err) {
        if (stopped) return;
        if (err instanceof ApiError && err.status === 404) return setGone(true);
        setError((err as Error).message);
        timer = setTimeout(() => void load(), 5000);
      }
    };
    reload.current = () => {
      clearTimeout(timer);
      void load();
    };
    void load();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [id]);

  const back = (
    <a {...linkProps("/dashboard/")} class="back">
      ← all sandboxes
    </a>
  );
  if (gone) {
    return (
      <section data-testid="sandbox-gone">
        {back}
        <h3>
          Sandbox <code>{id}</code> is gone
        </h3>
        <p class="muted">It was killed or timed out.</p>
      </section>
    );
  }
  return (
    <section>
      {back}
      <div class="row">
        <h3>
          Sandbox <code>{id}</code> {info ? <span class={`state ${info.state}`}>{info.state}</span> : null}
        </h3>
        {info ? <SandboxActions sandbox={info} changed={() => reload.current()} /> : null}
      </div>
      {error ? <p class="error">{error}</p> : null}
      {info ? (
        <p class="facts">
          template <b>{info.template_id}</b> · runtime <b>{info.runtime}</b> · {info.vcpu_count} vCPU · {info.memory_mb} MiB · up {duration(Date.now() - Date.parse(info.created_at))}
          {info.state === "paused" ? " · paused" : ` · ends in ${duration(Date.parse(info.timeout_at) - Date.now())}`}
        </p>
      ) : null}
      <div class="grid charts">
        <TimeChart title="CPU" unit="%" times={series?.times ?? []} values={series?.cpu ?? []} max={100} />
        <TimeChart title="Memory" unit="MiB" times={series?.times ?? []} values={series?.memMiB ?? []} />
        <TimeChart title="Disk" unit="MiB" times={series?.times ?? []} values={series?.diskMiB ?? []} />
      </div>
      {info?.state === "running" ? <TerminalView sandboxId={id} /> : <article class="muted">The terminal opens when the sandbox runs.</article>}
      <div class="grid">
        <EventLog sandboxId={id} />
        {info ? <AuditLog sandboxId={id} since={info.created_at} /> : null}
      </div>
      {info?.state === "running" ? <ProcessList sandboxId={id} /> : null}
      {info?.state === "running" ? <FileBrowser sandboxId={id} /> : null}
    </section>
  );
}
