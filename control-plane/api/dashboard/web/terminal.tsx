import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, call, ws } from "./api";

interface SessionStatus {
  session_id: string;
  running: boolean;
  exit_code: number | null;
}

type State = "starting" | "connected" | "reconnecting" | "exited" | "failed";

/** Which terminal session this browser last had in a sandbox (an id, not a secret): a reload re-attaches to it. */
const storageKey = (sandboxId: string) => `locale2b.terminal.${sandboxId}`;

/**
 * A terminal into the sandbox: an interactive `bash -i -l` in a PTY, started
 * through envd's process API as a workspace session (exec/start). Output
 * comes as server-sent events from the session's buffer (stream, resumed at
 * the last offset after a drop, repainted from the start after a reload);
 * keystrokes and pastes go in order, batched while one is in flight
 * (input); the window's size follows the element (resize).
 */
export function TerminalView({ sandboxId }: { sandboxId: string }) {
  const box = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<State>("starting");
  const [message, setMessage] = useState("");
  const [generation, setGeneration] = useState(0);
  const reconnect = useRef<() => void>(() => undefined);

  useEffect(() => {
    const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000, fontFamily: "ui-monospace, 'DejaVu Sans Mono', monospace" });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(box.current!);
    fit.fit();
    const base = (sid: string) => ws(`/sandboxes/${sandboxId}/exec/${encodeURIComponent(sid)}`);
    let sessionId: string | undefined;
    let offset = 0;
    let es: EventSource | undefined;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let disposed = false;

    const attach = () => {
      es?.close();
      if (disposed || !sessionId) return;
      const sid = sessionId;
      es = new EventSource(`${base(sid)}/stream?offset=${offset}`);
      es.onopen = () => setState("connected");
      es.addEventListener("output", (m) => {
        const d = JSON.parse((m as MessageEvent).data) as { offset: number; next_offset: number; output: string };
        if (d.next_offset <= offset) return;
        term.write(d.output);
        offset = d.next_offset;
      });
      es.addEventListener("dropped", (m) => {
        const d = JSON.parse((m as MessageEvent).data) as { dropped_bytes: number };
        term.write(`\r\n\x1b[33m[${d.dropped_bytes} bytes of output were dropped]\x1b[0m\r\n`);
      });
      es.addEventListener("exit", (m) => {
        const d = JSON.parse((m as MessageEvent).data) as { exit_code: number | null };
        es?.close();
        term.write(`\r\n\x1b[2m[the shell exited (code ${d.exit_code ?? "unknown"})]\x1b[0m\r\n`);
        localStorage.removeItem(storageKey(sandboxId));
        setState("exited");
      });
      es.onerror = () => {
        // A dropped stream (server restart, network, a paused sandbox): try again from the last offset.
        es?.close();
        if (disposed) return;
        setState("reconnecting");
        clearTimeout(retry);
        retry = setTimeout(attach, 1500);
      };
    };
    reconnect.current = () => {
      clearTimeout(retry);
      attach();
    };

    const start = async () => {
      const saved = localStorage.getItem(storageKey(sandboxId));
      if (saved) {
        const st = await call<SessionStatus>("GET", `${base(saved)}/status`).catch(() => undefined);
        if (st?.running) sessionId = saved;
      }
      if (!sessionId) {
        const wanted = `dash-${crypto.getRandomValues(new Uint32Array(2)).join("").slice(0, 12)}`;
        const startIn = (dir: string) =>
          call<SessionStatus>("POST", ws(`/sandboxes/${sandboxId}/exec/start`), {
            session_id: wanted,
            cols: term.cols,
            rows: term.rows,
            env: { TERM: "xterm-256color", COLORTERM: "truecolor" },
            working_dir: dir,
          });
        // The sandbox user's home, or / in a template that has none.
        const st = await startIn("/home/user").catch((err: unknown) => {
          if (err instanceof ApiError && err.status === 400) return startIn("/");
          throw err;
        });
        sessionId = st.session_id;
        localStorage.setItem(storageKey(sandboxId), sessionId);
      } else {
        await sendSize();
      }
      if (disposed) return;
      offset = 0;
      term.reset();
      attach();
      term.focus();
    };

    // Input in order: what is typed while a write is in flight goes in the next one.
    let pending = "";
    let sending = false;
    const flush = async () => {
      if (sending || !pending || !sessionId) return;
      sending = true;
      const data = pending;
      pending = "";
      try {
        await call("POST", `${base(sessionId)}/input`, { input: data });
      } catch (err) {
        term.write(`\r\n\x1b[31m[input lost: ${(err as Error).message}]\x1b[0m\r\n`);
      } finally {
        sending = false;
        if (pending) void flush();
      }
    };
    const onData = term.onData((d) => {
      pending += d;
      void flush();
    });

    let sizeTimer: ReturnType<typeof setTimeout> | undefined;
    const sendSize = () =>
      sessionId ? call("POST", `${base(sessionId)}/resize`, { cols: term.cols, rows: term.rows }).catch(() => undefined) : Promise.resolve(undefined);
    const onResize = term.onResize(() => {
      clearTimeout(sizeTimer);
      sizeTimer = setTimeout(() => void sendSize(), 150);
    });
    const ro = new ResizeObserver(() => fit.fit());
    ro.observe(box.current!);

    start().catch((err: unknown) => {
      setState("failed");
      setMessage((err as Error).message);
    });
    return () => {
      disposed = true;
      clearTimeout(retry);
      clearTimeout(sizeTimer);
      es?.close();
      ro.disconnect();
      onData.dispose();
      onResize.dispose();
      term.dispose();
    };
  }, [sandboxId, generation]);

  const newTerminal = async () => {
    const saved = localStorage.getItem(storageKey(sandboxId));
    if (saved) await call("DELETE", ws(`/sandboxes/${sandboxId}/exec/${encodeURIComponent(saved)}`)).catch(() => undefined);
    localStorage.removeItem(storageKey(sandboxId));
    setState("starting");
    setMessage("");
    setGeneration((g) => g + 1);
  };

  return (
    <article>
      <header class="row">
        <span>
          Terminal <small class={state === "connected" ? "ok" : "muted"} data-terminal-state={state}>{state}</small>
        </span>
        <span class="actions compact">
          <button class="outline" onClick={() => reconnect.current()} disabled={state === "exited" || state === "failed"}>
            Reconnect
          </button>
          <button class="outline" onClick={() => void newTerminal()}>
            New terminal
          </button>
        </span>
      </header>
      {message ? <p class="error">{message}</p> : null}
      <div class="terminal" ref={box} data-testid="terminal" />
    </article>
  );
}
