import { call, e2b } from "./api";
import { bytes } from "./format";
import { useLoad } from "./load";
import { linkProps } from "./router";

export interface TemplateInfo {
  templateID: string;
  buildID: string;
  buildStatus: string;
  names: string[];
  cpuCount: number;
  memoryMB: number;
  createdAt: string;
  updatedAt: string;
  spawnCount: number;
  buildCount: number;
  sizeBytes?: number;
}

/** The server's templates (E2B GET /templates): names, the newest build's state, size, use. */
export function TemplatesPage() {
  const list = useLoad(() => call<TemplateInfo[]>("GET", e2b("/templates")), [], 10_000);
  return (
    <section>
      <div class="row">
        <h3>
          Templates <small class="muted">{list.data ? list.data.length : "loading…"}</small>
        </h3>
        <button class="outline" onClick={list.reload}>
          Refresh
        </button>
      </div>
      {list.error ? <p class="error">{list.error}</p> : null}
      <div class="table-wrap">
        <table class="striped" data-testid="templates">
          <thead>
            <tr>
              <th>Template</th>
              <th>Names</th>
              <th>Newest build</th>
              <th>Shape</th>
              <th>Size</th>
              <th>Builds</th>
              <th>Sandboxes made</th>
              <th>Updated</th>
            </tr>
          </thead>
          <tbody>
            {(list.data ?? []).map((t) => (
              <tr key={t.templateID} data-template-id={t.templateID}>
                <td>
                  <a {...linkProps(`/dashboard/templates/${encodeURIComponent(t.templateID)}`)}>
                    <code>{t.templateID}</code>
                  </a>
                </td>
                <td class="names">{t.names.join(", ")}</td>
                <td>
                  <span class={`state ${t.buildStatus}`}>{t.buildStatus}</span>
                </td>
                <td>
                  {t.cpuCount} vCPU · {t.memoryMB} MiB
                </td>
                <td>{t.sizeBytes !== undefined ? bytes(t.sizeBytes) : "–"}</td>
                <td>{t.buildCount}</td>
                <td>{t.spawnCount}</td>
                <td>{new Date(t.updatedAt).toLocaleString()}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {list.data && list.data.length === 0 ? <p class="muted">No templates yet: build one with E2B's Template SDK or 'locale2b template build'.</p> : null}
    </section>
  );
}
