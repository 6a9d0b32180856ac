import { useState } from "preact/hooks";
import { signIn, type SessionInfo } from "./api";

/** The key goes in the POST body once; the server answers with a cookie, and the page never stores the key. */
export function SignIn({ done }: { done: (s: SessionInfo) => void }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  return (
    <main class="container signin">
      <article>
        <header>
          <h2>locale2b</h2>
          <p>Sign in with an API key of this server (the <code>E2B_API_KEY</code> that <code>npm start</code> printed).</p>
        </header>
        <form
          onSubmit={async (e) => {
            e.preventDefault();
            setBusy(true);
            setError("");
            try {
              const s = await signIn(key);
              setKey("");
              done(s);
            } catch (err) {
              setError((err as Error).message);
            } finally {
              setBusy(false);
            }
          }}
        >
          <input type="password" name="api_key" placeholder="e2b_…" autocomplete="off" required value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} aria-label="API key" />
          <button type="submit" aria-busy={busy} disabled={busy}>
            Sign in
          </button>
          {error ? <p class="error" role="alert">{error}</p> : null}
        </form>
      </article>
    </main>
  );
}
