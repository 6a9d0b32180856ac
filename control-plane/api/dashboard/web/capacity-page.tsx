import { call, ws } from "./api";
import { bytes } from "./format";
import { useLoad } from "./load";

interface Capacity {
  runtime: string;
  sandboxes: { total: number; running: number; paused: number; max: number };
  memory_mb: { used: number; budget: number };
  vcpus: { used: number; budget: number };
  warm_pools: { image: string; ready: number; starting: number; target: number }[];
  starts: { running: number; queued: number; rejected: number; concurrent: number; queue: number };
  host: { memory_total_bytes: number; memory_free_bytes: number; cpus: number };
}

function Meter({ label, used, total, text, id }: { label: string; used: number; total: number; text: string; id: string }) {
  return (
    <div class="meter" data-meter={id}>
      <div class="row">
        <span>{label}</span>
        <small>{text}</small>
      </div>
      <progress value={used} max={Math.max(1, total)} />
    </div>
  );
}

/** The host's capacity (workspace GET /capacity, one call every 5 s): sandboxes and memory against the limits, warm pools, starts. */
export function CapacityPage() {
  const c = useLoad(() => call<Capacity>("GET", ws("/capacity")), [], 5000);
  const d = c.data;
  return (
    <section data-testid="capacity">
      <h3>
        Capacity <small class="muted">{d ? `${d.runtime} runtime · ${d.host.cpus} CPUs` : "loading…"}</small>
      </h3>
      {c.error ? <p class="error">{c.error}</p> : null}
      {d ? (
        <>
          <article>
            <Meter id="sandboxes" label="Sandboxes" used={d.sandboxes.total} total={d.sandboxes.max} text={`${d.sandboxes.total} of ${d.sandboxes.max} (${d.sandboxes.running} running, ${d.sandboxes.paused} paused)`} />
            <Meter id="memory-budget" label="Memory budget" used={d.memory_mb.used} total={d.memory_mb.budget} text={`${d.memory_mb.used} of ${d.memory_mb.budget} MiB given to sandboxes`} />
            <Meter id="cpu-budget" label="CPU budget" used={d.vcpus.used} total={d.vcpus.budget} text={`${d.vcpus.used} of ${d.vcpus.budget} vCPUs given to sandboxes`} />
            <Meter
              id="host-memory"
              label="Host memory"
              used={d.host.memory_total_bytes - d.host.memory_free_bytes}
              total={d.host.memory_total_bytes}
              text={`${bytes(d.host.memory_total_bytes - d.host.memory_free_bytes)} of ${bytes(d.host.memory_total_bytes)} in use`}
            />
            <p class="muted">
              Starts: {d.starts.running} in progress, {d.starts.queued} waiting ({d.starts.concurrent} at a time, {d.starts.queue} may wait), {d.starts.rejected} refused since the server started.
            </p>
          </article>
          <article>
            <header>Warm pools</header>
            {d.warm_pools.length ? (
              <table class="striped" data-testid="warm-pools">
                <thead>
                  <tr>
                    <th>Image</th>
                    <th>Ready</th>
                    <th>Starting</th>
                    <th>Kept</th>
                  </tr>
                </thead>
                <tbody>
                  {d.warm_pools.map((p) => (
                    <tr key={p.image} data-pool={p.image}>
                      <td>{p.image}</td>
                      <td>{p.ready}</td>
                      <td>{p.starting}</td>
                      <td>{p.target}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            ) : (
              <p class="muted">No warm pools (serve --warm-pool N keeps sandboxes started ahead of creates).</p>
            )}
          </article>
        </>
      ) : null}
    </section>
  );
}
