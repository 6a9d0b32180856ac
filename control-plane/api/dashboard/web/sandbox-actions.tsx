import { useState } from "preact/hooks";
import type { ComponentChildren } from "preact";
import { actions, type SandboxInfo } from "./api";
import { linkProps } from "./router";

/** Pause / resume, kill and set timeout for one sandbox; `changed` reloads what shows it. */
export function SandboxActions({ sandbox, changed, compact }: { sandbox: SandboxInfo; changed: () => void; compact?: boolean }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const [timeout, setTimeoutValue] = useState("300");
  const [result, setResult] = useState<ComponentChildren>(null);
  const run = async (what: () => Promise<unknown>) => {
    setBusy(true);
    setError("");
    setResult(null);
    try {
      await what();
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
      changed();
    }
  };
  const id = sandbox.sandbox_id;
  return (
    <div class={compact ? "actions compact" : "actions"}>
      {sandbox.state === "paused" ? (
        <button class="secondary" disabled={busy} data-action="resume" onClick={() => run(() => actions.resume(id))}>
          Resume
        </button>
      ) : (
        <button class="secondary" disabled={busy || sandbox.state !== "running"} data-action="pause" onClick={() => run(() => actions.pause(id))}>
          Pause
        </button>
      )}
      <button
        class="contrast"
        disabled={busy}
        data-action="kill"
        onClick={() => {
          if (confirm(`Kill sandbox ${id}? Its processes and files are gone for good.`)) void run(() => actions.kill(id));
        }}
      >
        Kill
      </button>
      {compact ? null : (
        <>
          <button
            class="secondary"
            disabled={busy || sandbox.state !== "running"}
            data-action="snapshot"
            onClick={() =>
              run(async () => {
                const snap = await actions.snapshot(id);
                setResult(
                  <>
                    snapshot <code>{snap.snapshotID}</code>
                  </>,
                );
              })
            }
          >
            Snapshot
          </button>
          <button
            class="secondary"
            disabled={busy || sandbox.state !== "running"}
            data-action="fork"
            onClick={() =>
              run(async () => {
                const [first] = await actions.fork(id);
                if (!first || "error" in first) throw new Error(first ? first.error.message : "the fork made no sandbox");
                const child = first.sandbox.sandboxID;
                setResult(
                  <>
                    forked:{" "}
                    <a {...linkProps(`/dashboard/sandboxes/${child}`)} data-fork={child}>
                      <code>{child}</code>
                    </a>
                  </>,
                );
              })
            }
          >
            Fork
          </button>
        </>
      )}
      <form
        class="timeout"
        onSubmit={(e) => {
          e.preventDefault();
          void run(() => actions.setTimeout(id, Number(timeout)));
        }}
      >
        <input type="number" min="1" max="86400" value={timeout} aria-label="timeout in seconds" onInput={(e) => setTimeoutValue((e.target as HTMLInputElement).value)} />
        <button class="outline" disabled={busy || sandbox.state !== "running"} data-action="timeout" type="submit" title="the sandbox ends this many seconds from now">
          Set timeout
        </button>
      </form>
      {error ? <small class="error">{error}</small> : null}
      {result ? (
        <small class="ok" data-testid="action-result">
          {result}
        </small>
      ) : null}
    </div>
  );
}
