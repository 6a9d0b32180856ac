import { useState } from "preact/hooks";
import { call } from "./api";
import { useLoad } from "./load";

interface KeyInfo {
  id: string;
  name: string;
  mask: string;
  created_at: string;
  last_used_at: string | null;
}

const KEYS = "/dashboard/api/keys";

/**
 * The server's API keys (/dashboard/api/keys): list, create (the new key is
 * shown here once, and kept nowhere in the browser), revoke. The key this
 * session signed in with cannot be revoked here.
 */
export function KeysPage({ ownKeyId }: { ownKeyId: string }) {
  const list = useLoad(() => call<KeyInfo[]>("GET", KEYS), []);
  const [name, setName] = useState("");
  const [created, setCreated] = useState<(KeyInfo & { key: string }) | undefined>();
  const [error, setError] = useState("");
  const create = async (e: Event) => {
    e.preventDefault();
    setError("");
    try {
      setCreated(await call<KeyInfo & { key: string }>("POST", KEYS, { name }));
      setName("");
    } catch (err) {
      setError((err as Error).message);
    }
    list.reload();
  };
  const revoke = async (k: KeyInfo) => {
    if (!confirm(`Revoke ${k.id} (${k.name})? Every client and dashboard using it is refused from now on.`)) return;
    setError("");
    try {
      await call("DELETE", `${KEYS}/${k.id}`);
      if (created?.id === k.id) setCreated(undefined);
    } catch (err) {
      setError((err as Error).message);
    }
    list.reload();
  };
  return (
    <section>
      <h3>API keys</h3>
      <form class="filters" onSubmit={(e) => void create(e)}>
        <input name="key_name" placeholder="name: who or what will use it" value={name} maxLength={100} required onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        <button type="submit" data-action="create-key">
          Create key
        </button>
      </form>
      {created ? (
        <article class="new-key" data-testid="new-key">
          <p>
            New key <code>{created.id}</code> ({created.name}). Copy it now: it is not shown again.
          </p>
          <input readOnly value={created.key} data-testid="new-key-value" onFocus={(e) => (e.target as HTMLInputElement).select()} />
          <button class="outline" onClick={() => setCreated(undefined)}>
            Done
          </button>
        </article>
      ) : null}
      {error || list.error ? <p class="error">{error || list.error}</p> : null}
      <div class="table-wrap">
        <table class="striped" data-testid="keys">
          <thead>
            <tr>
              <th>ID</th>
              <th>Name</th>
              <th>Key</th>
              <th>Created</th>
              <th>Last used</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {(list.data ?? []).map((k) => (
              <tr key={k.id} data-key-id={k.id}>
                <td>
                  <code>{k.id}</code>
                </td>
                <td>{k.name}</td>
                <td>
                  <code>{k.mask}</code>
                </td>
                <td>{new Date(k.created_at).toLocaleString()}</td>
                <td>{k.last_used_at ? new Date(k.last_used_at).toLocaleString() : "never"}</td>
                <td class="actions">
                  {k.id === ownKeyId ? (
                    <small class="muted">this session's key</small>
                  ) : (
                    <button class="outline contrast" data-action="revoke-key" onClick={() => void revoke(k)}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
