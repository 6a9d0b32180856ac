import { useState } from "preact/hooks";
import { call, e2b } from "./api";
import { bytes } from "./format";
import { useLoad } from "./load";
import { linkProps, navigate } from "./router";

interface SnapshotInfo {
  snapshotID: string;
  names: string[];
  sandboxID: string;
  templateID: string;
  kind: string;
  sizeBytes: number;
  createdAt: string;
}

/**
 * The server's snapshots (E2B GET /snapshots, with the sandbox each came
 * from): start a sandbox from one (POST /sandboxes with it as the
 * template) or delete it (DELETE /templates/{id}, as the SDKs do).
 */
export function SnapshotsPage() {
  const list = useLoad(() => call<SnapshotInfo[]>("GET", e2b("/snapshots?limit=100")), [], 10_000);
  const [error, setError] = useState("");
  const [busy, setBusy] = useState("");
  const act = async (id: string, f: () => Promise<void>) => {
    setBusy(id);
    setError("");
    try {
      await f();
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy("");
      list.reload();
    }
  };
  const start = (s: SnapshotInfo) =>
    act(s.snapshotID, async () => {
      const sbx = await call<{ sandboxID: string }>("POST", e2b("/sandboxes"), { templateID: s.snapshotID, timeout: 300 });
      navigate(`/dashboard/sandboxes/${sbx.sandboxID}`);
    });
  const remove = (s: SnapshotInfo) =>
    act(s.snapshotID, async () => {
      if (!confirm(`Delete snapshot ${s.snapshotID}?`)) return;
      await call("DELETE", e2b(`/templates/${encodeURIComponent(s.snapshotID)}`));
    });
  return (
    <section>
      <div class="row">
        <h3>
          Snapshots <small class="muted">{list.data ? `${list.data.length}${list.data.length === 100 ? "+ (the newest 100)" : ""}` : "loading…"}</small>
        </h3>
        <button class="outline" onClick={list.reload}>
          Refresh
        </button>
      </div>
      {error || list.error ? <p class="error">{error || list.error}</p> : null}
      <div class="table-wrap">
        <table class="striped" data-testid="snapshots">
          <thead>
            <tr>
              <th>Snapshot</th>
              <th>From sandbox</th>
              <th>Template</th>
              <th>Kind</th>
              <th>Size</th>
              <th>Taken</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {(list.data ?? []).map((s) => (
              <tr key={s.snapshotID} data-snapshot-id={s.snapshotID}>
                <td>
                  <code>{s.snapshotID}</code>
                  {s.names.length && s.names[0] !== s.snapshotID ? <small class="names"> {s.names.join(", ")}</small> : null}
                </td>
                <td>
                  <a {...linkProps(`/dashboard/sandboxes/${s.sandboxID}`)}>
                    <code>{s.sandboxID}</code>
                  </a>
                </td>
                <td>{s.templateID}</td>
                <td>{s.kind}</td>
                <td>{bytes(s.sizeBytes)}</td>
                <td>{new Date(s.createdAt).toLocaleString()}</td>
                <td class="actions" aria-busy={busy === s.snapshotID}>
                  <button class="outline" data-action="start-from-snapshot" disabled={!!busy} onClick={() => void start(s)}>
                    Start sandbox
                  </button>
                  <button class="outline contrast" data-action="delete-snapshot" disabled={!!busy} onClick={() => void remove(s)}>
                    Delete
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && list.data.length === 0 ? <p class="muted">No snapshots: take one from a sandbox's page.</p> : null}
    </section>
  );
}
