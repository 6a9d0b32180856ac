import { useEffect, useState } from "preact/hooks";
import { call, upload, ws } from "./api";
import { bytes } from "./format";

interface Entry {
  name: string;
  path: string;
  is_dir: boolean;
  size: number;
  permissions: string;
  owner: string;
  modified_at: string;
}

function parent(dir: string): string {
  const up = dir.replace(/\/+$/, "").replace(/\/[^/]*$/, "");
  return up === "" ? "/" : up;
}

/** A sandbox's files as its user sees them (workspace files/list), downloads (files/download) and uploads (files/upload). */
export function FileBrowser({ sandboxId }: { sandboxId: string }) {
  const [dir, setDir] = useState("/home/user");
  const [entries, setEntries] = useState<Entry[] | undefined>();
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const [version, setVersion] = useState(0);
  const base = `/sandboxes/${sandboxId}/files`;

  useEffect(() => {
    let stopped = false;
    setError("");
    call<{ entries: Entry[] }>("GET", ws(`${base}/list?path=${encodeURIComponent(dir)}`)).then(
      (r) => !stopped && setEntries(r.entries.sort((a, b) => Number(b.is_dir) - Number(a.is_dir) || a.name.localeCompare(b.name))),
      (err: unknown) => !stopped && (setEntries([]), setError((err as Error).message)),
    );
    return () => {
      stopped = true;
    };
  }, [sandboxId, dir, version]);

  return (
    <article data-testid="files">
      <header class="row">
        <span>
          Files <code data-testid="files-dir">{dir}</code>
        </span>
        <span class="actions compact">
          <button class="outline" disabled={dir === "/"} onClick={() => setDir(parent(dir))}>
            Up
          </button>
          <label class="upload" aria-busy={busy}>
            <input
              type="file"
              data-testid="upload"
              disabled={busy}
              onChange={async (e) => {
                const input = e.target as HTMLInputElement;
                const file = input.files?.[0];
                if (!file) return;
                setBusy(true);
                setError("");
                try {
                  await upload(ws(`${base}/upload?path=${encodeURIComponent(`${dir.replace(/\/+$/, "")}/${file.name}`)}`), file);
                  setVersion((v) => v + 1);
                } catch (err) {
                  setError((err as Error).message);
                } finally {
                  setBusy(false);
                  input.value = "";
                }
              }}
            />
          </label>
        </span>
      </header>
      {error ? <p class="error">{error}</p> : null}
      <div class="files">
        <table class="striped">
          <tbody>
            {(entries ?? []).map((e) => (
              <tr key={e.path} data-file={e.name}>
                <td>
                  {e.is_dir ? (
                    <a href="#" onClick={(ev) => (ev.preventDefault(), setDir(e.path))}>
                      {e.name}/
                    </a>
                  ) : (
                    <a href={ws(`${base}/download?path=${encodeURIComponent(e.path)}`)} download={e.name}>
                      {e.name}
                    </a>
                  )}
                </td>
                <td class="muted">{e.is_dir ? "" : bytes(e.size)}</td>
                <td class="muted">
                  <code>{e.permissions}</code> {e.owner}
                </td>
                <td class="muted">{new Date(e.modified_at).toLocaleString()}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {entries && entries.length === 0 && !error ? <p class="muted">Empty.</p> : null}
      </div>
    </article>
  );
}
