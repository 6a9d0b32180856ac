import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { call, ws, type SandboxInfo } from "./api";
import { duration, mib, pct } from "./format";
import { SparkMetrics } from "./metrics";
import { linkProps } from "./router";
import { SandboxActions } from "./sandbox-actions";
import { Sparkline } from "./sparkline";

/** Every live sandbox, whichever API made it: refreshed on each lifecycle event (SSE) and every few seconds. */
export function SandboxList() {
  const [sandboxes, setSandboxes] = useState<SandboxInfo[] | undefined>();
  const [error, setError] = useState("");
  const [filter, setFilter] = useState("");
  const [stateFilter, setStateFilter] = useState("");
  const [, setTick] = useState(0);
  const metrics = useRef(new SparkMetrics());
  const reload = useRef<() => void>(() => undefined);

  useEffect(() => {
    let stopped = false;
    let pending: ReturnType<typeof setTimeout> | undefined;
    const load = async () => {
      try {
        const r = await call<{ sandboxes: SandboxInfo[] }>("GET", ws("/sandboxes"));
        if (stopped) return;
        setSandboxes(r.sandboxes);
        setError("");
        await metrics.current.refresh(r.sandboxes.filter((s) => s.state === "running").map((s) => s.sandbox_id));
        if (!stopped) setTick((t) => t + 1);
      } catch (err) {
        if (!stopped) setError((err as Error).message);
      }
    };
    reload.current = () => {
      clearTimeout(pending);
      pending = setTimeout(() => void load(), 100);
    };
    void load();
    const timer = setInterval(() => void load(), 5000);
    const es = new EventSource(ws("/events/stream?event_type=sandbox.*"));
    for (const t of ["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.destroyed"]) es.addEventListener(t, () => reload.current());
    const clock = setInterval(() => setTick((t) => t + 1), 1000);
    return () => {
      stopped = true;
      clearInterval(timer);
      clearInterval(clock);
      clearTimeout(pending);
      es.close();
    };
  }, []);

  const shown = useMemo(() => {
    const f = filter.trim().toLowerCase();
    return (sandboxes ?? []).filter((s) => (!stateFilter || s.state === stateFilter) && (!f || s.sandbox_id.includes(f) || s.template_id.toLowerCase().includes(f) || s.runtime.includes(f)));
  }, [sandboxes, filter, stateFilter]);

  const now = Date.now();
  return (
    <section>
      <div class="row">
        <h3>
          Sandboxes <small class="muted">{sandboxes ? `${sandboxes.length} live` : "loading…"}</small>
        </h3>
        <div class="filters">
          <input type="search" placeholder="filter: id, template, runtime" value={filter} onInput={(e) => setFilter((e.target as HTMLInputElement).value)} aria-label="filter" />
          <select value={stateFilter} onChange={(e) => setStateFilter((e.target as HTMLSelectElement).value)} aria-label="state">
            <option value="">any state</option>
            <option value="running">running</option>
            <option value="paused">paused</option>
          </select>
        </div>
      </div>
      {error ? <p class="error">{error}</p> : null}
      <div class="table-wrap">
        <table class="striped" data-testid="sandboxes">
          <thead>
            <tr>
              <th>Sandbox</th>
              <th>State</th>
              <th>Template</th>
              <th>Runtime</th>
              <th>Age</th>
              <th>Ends in</th>
              <th>CPU</th>
              <th>Memory</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {shown.map((s) => {
              const m = metrics.current.series.get(s.sandbox_id);
              return (
                <tr key={s.sandbox_id} data-sandbox-id={s.sandbox_id} data-state={s.state}>
                  <td>
                    <a {...linkProps(`/dashboard/sandboxes/${s.sandbox_id}`)}>
                      <code>{s.sandbox_id}</code>
                    </a>
                  </td>
                  <td>
                    <span class={`state ${s.state}`}>{s.state}</span>
                  </td>
                  <td>{s.template_id}</td>
                  <td>{s.runtime}</td>
                  <td>{duration(now - Date.parse(s.created_at))}</td>
                  <td>{s.state === "paused" ? "–" : duration(Date.parse(s.timeout_at) - now)}</td>
                  <td class="metric">
                    <Sparkline values={m?.cpu ?? []} max={100 * s.vcpu_count} label="CPU" /> {m?.cpu.length ? pct(m.cpu.at(-1)!) : ""}
                  </td>
                  <td class="metric">
                    <Sparkline values={m?.memMiB ?? []} max={m?.memTotalMiB} label="memory" /> {m?.memMiB.length ? mib(m.memMiB.at(-1)! * 1024 * 1024) : ""}
                  </td>
                  <td>
                    <SandboxActions sandbox={s} changed={() => reload.current()} compact />
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
        {sandboxes && shown.length === 0 ? <p class="muted">No sandboxes{sandboxes.length ? " match" : " yet: create one with an E2B SDK"}.</p> : null}
      </div>
    </section>
  );
}
