import { useState } from "preact/hooks";
import { call, ws } from "./api";
import { useLoad } from "./load";

interface ProcessInfo {
  pid: number;
  cmd: string;
  args: string[];
  cwd: string | null;
  tag: string | null;
}

/** The processes envd runs in the sandbox (workspace GET /sandboxes/{id}/processes), each with Kill (SIGKILL). */
export function ProcessList({ sandboxId }: { sandboxId: string }) {
  const list = useLoad(() => call<{ processes: ProcessInfo[] }>("GET", ws(`/sandboxes/${sandboxId}/processes`)), [sandboxId], 10_000);
  const [error, setError] = useState("");
  const kill = async (pid: number) => {
    setError("");
    try {
      await call("POST", ws(`/sandboxes/${sandboxId}/processes/${pid}/signal`), { signal: "SIGKILL" });
    } catch (err) {
      setError((err as Error).message);
    }
    list.reload();
  };
  const procs = list.data?.processes;
  return (
    <article data-testid="processes">
      <header class="row">
        <span>
          Processes <small class="muted">{procs ? procs.length : ""}</small>
        </span>
        <button class="outline" onClick={list.reload}>
          Refresh
        </button>
      </header>
      {error || list.error ? <p class="error">{error || list.error}</p> : null}
      <div class="table-wrap">
        <table class="striped">
          <thead>
            <tr>
              <th>PID</th>
              <th>Command</th>
              <th>Tag</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {(procs ?? []).map((p) => (
              <tr key={p.pid} data-pid={p.pid}>
                <td>{p.pid}</td>
                <td class="cmd" title={p.cwd ? `in ${p.cwd}` : undefined}>
                  <code>{[p.cmd, ...p.args].join(" ")}</code>
                </td>
                <td class="muted">{p.tag ?? ""}</td>
                <td class="actions">
                  <button class="outline contrast" data-action="kill-process" onClick={() => void kill(p.pid)}>
                    Kill
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {procs && procs.length === 0 ? <p class="muted">No processes started through envd.</p> : null}
    </article>
  );
}
