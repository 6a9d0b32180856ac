import "@picocss/pico/css/pico.min.css";
import "uplot/dist/uPlot.min.css";
import "@xterm/xterm/css/xterm.css";
import "./style.css";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { currentSession, onSignedOut, signOut, type SessionInfo } from "./api";
import { linkProps, navigate, usePath } from "./router";
import { AuditPage } from "./audit-page";
import { CapacityPage } from "./capacity-page";
import { KeysPage } from "./keys-page";
import { SandboxList } from "./sandbox-list";
import { SandboxPage } from "./sandbox-page";
import { SignIn } from "./sign-in";
import { SnapshotsPage } from "./snapshots-page";
import { TemplatePage } from "./template-page";
import { TemplatesPage } from "./templates-page";

/** The page's sections, in the top bar. */
const SECTIONS: [string, string][] = [
  ["/dashboard/", "Sandboxes"],
  ["/dashboard/templates", "Templates"],
  ["/dashboard/snapshots", "Snapshots"],
  ["/dashboard/keys", "API keys"],
  ["/dashboard/audit", "Audit log"],
  ["/dashboard/capacity", "Capacity"],
];

/** The page a path shows (unknown paths: the sandbox list). */
function Page({ path, session }: { path: string; session: SessionInfo }) {
  const p = path.replace(/\/+$/, "");
  let m = /^\/dashboard\/sandboxes\/([a-z0-9]+)$/.exec(p);
  if (m) return <SandboxPage id={m[1]!} key={m[1]} />;
  m = /^\/dashboard\/templates\/([^/]+)$/.exec(p);
  if (m) return <TemplatePage id={decodeURIComponent(m[1]!)} key={m[1]} />;
  switch (p) {
    case "/dashboard/templates":
      return <TemplatesPage />;
    case "/dashboard/snapshots":
      return <SnapshotsPage />;
    case "/dashboard/keys":
      return <KeysPage ownKeyId={session.key_id} />;
    case "/dashboard/audit":
      return <AuditPage />;
    case "/dashboard/capacity":
      return <CapacityPage />;
    default:
      return <SandboxList />;
  }
}

/** Which section a path belongs to (a sandbox's page: Sandboxes). */
function section(path: string): string {
  const found = SECTIONS.slice(1).find(([p]) => path === p || path.startsWith(`${p}/`));
  return found ? found[0] : "/dashboard/";
}

function App() {
  const [session, setSession] = useState<SessionInfo | null | undefined>(undefined);
  const path = usePath();
  useEffect(() => {
    onSignedOut(() => setSession(null));
    currentSession().then(
      (s) => setSession(s ?? null),
      () => setSession(null),
    );
  }, []);

  if (session === undefined) return <main class="container" aria-busy="true" />;
  if (session === null) {
    return (
      <SignIn
        done={(s) => {
          setSession(s);
          // Back to the page the sign-in interrupted (the server sent it here with ?next=).
          const next = new URLSearchParams(location.search).get("next");
          navigate(next && /^\/dashboard\/[A-Za-z0-9/_-]*$/.test(next) ? next : "/dashboard/");
        }}
      />
    );
  }
  const current = section(path);
  return (
    <>
      <nav class="container-fluid topbar">
        <ul>
          <li>
            <a {...linkProps("/dashboard/")}>
              <strong>locale2b</strong>
            </a>
          </li>
          {SECTIONS.map(([p, label]) => (
            <li key={p}>
              <a {...linkProps(p)} aria-current={p === current ? "page" : undefined} data-nav={label}>
                {label}
              </a>
            </li>
          ))}
        </ul>
        <ul>
          <li>
            <small class="muted" title={`session ends ${session.expires_at}`}>
              key <code>{session.key_id}</code>
            </small>
          </li>
          <li>
            <button
              class="outline secondary"
              data-action="sign-out"
              onClick={async () => {
                await signOut();
                setSession(null);
                navigate("/dashboard/");
              }}
            >
              Sign out
            </button>
          </li>
        </ul>
      </nav>
      <main class="container-fluid">
        <Page path={path} session={session} />
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
