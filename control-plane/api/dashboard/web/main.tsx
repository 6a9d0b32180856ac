import "@picocss/pico/css/pico.min.css";
import "uplot/dist/uPlot.min.css";
import "@xterm/xterm/css/xterm.css";
import "./style.css";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { currentSession, onSignedOut, signOut, type SessionInfo } from "./api";
import { linkProps, navigate, usePath } from "./router";
import { SandboxList } from "./sandbox-list";
import { SandboxPage } from "./sandbox-page";
import { SignIn } from "./sign-in";

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
  const m = /^\/dashboard\/sandboxes\/([a-z0-9]+)\/?$/.exec(path);
  return (
    <>
      <nav class="container-fluid topbar">
        <ul>
          <li>
            <a {...linkProps("/dashboard/")}>
              <strong>locale2b</strong>
            </a>
          </li>
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
      <main class="container-fluid">{m ? <SandboxPage id={m[1]!} key={m[1]} /> : <SandboxList />}</main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
