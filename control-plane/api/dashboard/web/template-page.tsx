import { useState } from "preact/hooks";
import { call, e2b } from "./api";
import { BuildLog } from "./build-log";
import { useLoad } from "./load";
import { linkProps, navigate } from "./router";

interface Build {
  buildID: string;
  status: string;
  createdAt: string;
  finishedAt?: string;
  cpuCount: number;
  memoryMB: number;
}

interface TemplateDetail {
  templateID: string;
  names: string[];
  createdAt: string;
  spawnCount: number;
  builds: Build[];
}

/** One template (E2B GET /templates/{id}): its builds, newest first, the chosen build's log live, and Delete. */
export function TemplatePage({ id }: { id: string }) {
  const t = useLoad(() => call<TemplateDetail>("GET", e2b(`/templates/${encodeURIComponent(id)}`)), [id]);
  const [chosen, setChosen] = useState<string | undefined>();
  const [error, setError] = useState("");
  const build = chosen ?? t.data?.builds[0]?.buildID;
  const remove = async () => {
    if (!confirm(`Delete template ${id}? Sandboxes already made from it keep running.`)) return;
    try {
      await call("DELETE", e2b(`/templates/${encodeURIComponent(id)}`));
      navigate("/dashboard/templates");
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <section>
      <a {...linkProps("/dashboard/templates")} class="back">
        ← all templates
      </a>
      <div class="row">
        <h3>
          Template <code>{id}</code> <small class="names">{t.data?.names.join(", ")}</small>
        </h3>
        <button class="outline contrast" data-action="delete-template" onClick={() => void remove()}>
          Delete
        </button>
      </div>
      {t.error || error ? <p class="error">{t.error || error}</p> : null}
      <div class="grid">
        <article>
          <header>Builds</header>
          <table class="striped" data-testid="builds">
            <tbody>
              {(t.data?.builds ?? []).map((b) => (
                <tr key={b.buildID} data-build-id={b.buildID} class={b.buildID === build ? "chosen" : ""}>
                  <td>
                    <a href="#" onClick={(e) => (e.preventDefault(), setChosen(b.buildID))}>
                      <code>{b.buildID.slice(0, 13)}</code>
                    </a>
                  </td>
                  <td>
                    <span class={`state ${b.status}`}>{b.status}</span>
                  </td>
                  <td class="muted">{new Date(b.createdAt).toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </article>
        {build ? <BuildLog key={build} templateId={id} buildId={build} changed={t.reload} /> : <article class="muted">No builds.</article>}
      </div>
    </section>
  );
}
