import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { Process, type StartRequestSchema } from "../../gen/ts/process/process_pb.js";
import { SESSION_TAG_PREFIX } from "../events/envd-activity.js";
import type { SandboxManager } from "../manager/sandbox-manager.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { ActivityDb } from "../store/activity-db.js";
import type { EnvdRpc, EnvdTarget } from "../transport/envd-rpc.js";
import { killProcessTree } from "../workspace/exec.js";
import { OutputSpool } from "./output-spool.js";
import { incompleteUtf8Tail, Session, type SessionRecord } from "./session.js";

export interface SessionLimits {
  /** Output kept per session (on disk), in bytes. */
  bufferBytes: number;
  /** Running sessions per sandbox. */
  perSandbox: number;
}

export interface StartSession {
  sandboxId: string;
  target: EnvdTarget;
  /** Run by `bash -l -c` in a PTY; empty: an interactive `bash -i -l`. */
  command: string;
  cwd: string;
  sessionId?: string;
  env?: Record<string, string>;
  cols?: number;
  rows?: number;
  keyId?: string;
}

export interface OutputRead {
  session_id: string;
  /** The output (UTF-8 text, or base64 when asked), after a marker when bytes were dropped. */
  output: string;
  encoding: "utf-8" | "base64";
  /** Offset of the first byte returned. */
  offset: number;
  /** Offset to ask for next (the server remembers it as this session's cursor too). */
  next_offset: number;
  /** Bytes between the offset asked for and `offset` that the buffer no longer had. */
  dropped_bytes: number;
  /** More output is already there (the poll hit max_bytes). */
  has_more: boolean;
  running: boolean;
  exit_code: number | null;
}

const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const MARKER_REATTACHED = "\r\n[locale2b: the control plane re-attached to this session: output the session wrote while it was detached is missing here]\r\n";

type StartInit = MessageInitShape<typeof StartRequestSchema>;

/**
 * Background shell sessions (the workspace API's exec/start): each one a
 * PTY process started through envd's process API with the tag
 * `l2b-session-<id>`, whose output the control plane copies to an
 * OutputSpool as it comes, so polls and streams read it at their own pace.
 * Sessions are kept in the activity database: after a control-plane
 * restart (or a broken connection, or a resume that reset the sandbox's
 * connections) they are re-attached with envd's Connect by tag. They end
 * with their sandbox.
 */
export class SessionManager {
  private readonly bySandbox = new Map<string, Map<string, Session>>();
  private readonly aborts = new Map<Session, AbortController>();
  private unsubscribe: (() => void) | undefined;
  private closed = false;

  constructor(
    private readonly o: {
      manager: SandboxManager;
      rpc: EnvdRpc;
      db: ActivityDb;
      dataDir: string;
      limits: SessionLimits;
      log: Logger;
    },
  ) {}

  private dir(sandboxId: string, sessionId?: string): string {
    const base = join(this.o.dataDir, "sessions", sandboxId);
    return sessionId ? join(base, sessionId) : base;
  }

  /** Restores the sessions of live sandboxes (re-attaching running ones) and forgets the others. */
  start(): void {
    this.o.db.flush();
    const live = new Set(this.o.manager.list().map((r) => r.id));
    for (const row of this.o.db.all<{ sandbox_id: string; session_id: string; body: string }>("SELECT sandbox_id, session_id, body FROM sessions")) {
      if (!live.has(row.sandbox_id)) {
        this.o.db.run("DELETE FROM sessions WHERE sandbox_id = ?", [row.sandbox_id]);
        rmSync(this.dir(row.sandbox_id), { recursive: true, force: true });
        continue;
      }
      const rec = JSON.parse(row.body) as SessionRecord;
      const s = new Session(rec, new OutputSpool(this.dir(rec.sandbox_id, rec.session_id), this.o.limits.bufferBytes));
      this.sessions(rec.sandbox_id).set(rec.session_id, s);
      if (rec.running) this.attach(s, undefined, true);
    }
    // Spool folders of sandboxes that are gone (a crash between a kill and its clean-up).
    try {
      for (const id of readdirSync(join(this.o.dataDir, "sessions"))) if (!live.has(id)) rmSync(this.dir(id), { recursive: true, force: true });
    } catch {
      // no sessions yet
    }
    this.unsubscribe = this.o.manager.events.subscribe({}, (e) => {
      if (e.type === "resumed") {
        for (const s of this.bySandbox.get(e.sandbox.id)?.values() ?? []) {
          if (s.rec.running && !s.attached) this.attach(s, undefined, !s.detachedForPause);
          s.detachedForPause = false;
        }
      } else if (e.type === "killed") {
        this.forgetSandbox(e.sandbox.id);
      }
    });
  }

  /**
   * Closes the streams of a sandbox's sessions before it is paused (see
   * SandboxManager's quiesce); they re-attach when it resumes.
   */
  async detach(sandboxId: string): Promise<void> {
    const waits: Promise<void>[] = [];
    for (const s of this.bySandbox.get(sandboxId)?.values() ?? []) {
      const abort = this.aborts.get(s);
      if (!abort) continue;
      s.detachedForPause = true;
      abort.abort();
      waits.push(new Promise((resolve) => {
        const check = () => (s.attached ? setTimeout(check, 5) : resolve());
        check();
      }));
    }
    await Promise.all(waits);
  }

  private sessions(sandboxId: string): Map<string, Session> {
    let m = this.bySandbox.get(sandboxId);
    if (!m) this.bySandbox.set(sandboxId, (m = new Map()));
    return m;
  }

  private persist(s: Session): void {
    this.o.db.write("INSERT OR REPLACE INTO sessions (sandbox_id, session_id, body) VALUES (?, ?, ?)", [s.rec.sandbox_id, s.rec.session_id, JSON.stringify(s.rec)]);
  }

  private forgetSandbox(sandboxId: string): void {
    const sessions = this.bySandbox.get(sandboxId);
    this.bySandbox.delete(sandboxId);
    for (const s of sessions?.values() ?? []) {
      this.aborts.get(s)?.abort();
      if (s.rec.running) {
        s.rec = { ...s.rec, running: false, error: "the sandbox was destroyed", ended_at: new Date().toISOString() };
      }
      s.notify();
      s.spool.close();
    }
    this.o.db.write("DELETE FROM sessions WHERE sandbox_id = ?", [sandboxId]);
    rmSync(this.dir(sandboxId), { recursive: true, force: true });
  }

  /** Starts a session and answers once its process runs (or with the reason it could not start). */
  async create(o: StartSession): Promise<Session> {
    const sessionId = o.sessionId ?? `s${Math.random().toString(36).slice(2, 10)}${Date.now().toString(36).slice(-4)}`;
    if (!SESSION_ID.test(sessionId)) {
      throw new ControlPlaneError("invalid", `invalid session_id '${sessionId.slice(0, 80)}': use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit`);
    }
    const sessions = this.sessions(o.sandboxId);
    const existing = sessions.get(sessionId);
    if (existing?.rec.running) throw new ControlPlaneError("conflict", `session '${sessionId}' is already running in sandbox '${o.sandboxId}': pick another session_id, or DELETE it first`);
    const running = [...sessions.values()].filter((s) => s.rec.running).length;
    if (running >= this.o.limits.perSandbox) {
      throw new ControlPlaneError("capacity", `sandbox '${o.sandboxId}' already runs ${running} sessions (the limit): DELETE some first`, 1);
    }
    if (existing) {
      existing.spool.remove();
      sessions.delete(sessionId);
    }
    const cols = o.cols ?? 200;
    const rows = o.rows ?? 50;
    const rec: SessionRecord = {
      sandbox_id: o.sandboxId,
      session_id: sessionId,
      command: o.command,
      cwd: o.cwd,
      cols,
      rows,
      running: true,
      exit_code: null,
      started_at: new Date().toISOString(),
      cursor: 0,
      ...(o.keyId ? { key_id: o.keyId } : {}),
    };
    const spool = new OutputSpool(this.dir(o.sandboxId, sessionId), this.o.limits.bufferBytes);
    const s = new Session(rec, spool);
    sessions.set(sessionId, s);
    const start: StartInit = {
      process: {
        cmd: "/bin/bash",
        args: o.command ? ["-l", "-c", o.command] : ["-i", "-l"],
        envs: { TERM: "dumb", ...o.env },
        cwd: o.cwd,
      },
      pty: { size: { cols, rows } },
      tag: `${SESSION_TAG_PREFIX}${sessionId}`,
    };
    await new Promise<void>((resolve, reject) => {
      this.attach(s, { init: start, target: o.target, done: (err) => (err ? reject(err) : resolve()) }, false);
    }).catch((err: unknown) => {
      sessions.delete(sessionId);
      spool.remove();
      throw err;
    });
    return s;
  }

  /**
   * Copies the session's output to its spool until it ends: from a new
   * Start, or (re-attaching) from envd's Connect by tag. Reconnects while
   * the sandbox runs; stops when it is paused (its resume re-attaches) or gone.
   */
  private attach(s: Session, first: { init: StartInit; target: EnvdTarget; done: (err?: Error) => void } | undefined, reattach: boolean): void {
    if (this.closed) return;
    const abort = new AbortController();
    this.aborts.set(s, abort);
    s.attached = true;
    const log = this.o.log.child({ sandboxId: s.rec.sandbox_id, sessionId: s.id });
    const tag = `${SESSION_TAG_PREFIX}${s.id}`;
    let pending = first;
    let detached = reattach;
    const run = async () => {
      let backoff = 200;
      while (!abort.signal.aborted && s.rec.running) {
        const target = pending?.target ?? this.target(s.rec.sandbox_id);
        if (!target) return; // paused or gone
        const client = this.o.rpc.client(Process, target);
        try {
          const stream = pending
            ? client.start(pending.init, { signal: abort.signal })
            : client.connect({ process: { selector: { case: "tag", value: tag } } }, { signal: abort.signal });
          for await (const res of stream) {
            const e = res.event?.event;
            if (!e) continue;
            if (e.case === "start") {
              backoff = 200;
              if (pending) {
                s.rec = { ...s.rec, pid: e.value.pid };
                this.persist(s);
                pending.done();
                pending = undefined;
              } else if (detached) {
                s.spool.append(Buffer.from(MARKER_REATTACHED));
                s.notify();
              }
              detached = false;
            } else if (e.case === "data") {
              s.spool.append(e.value.output.value as Uint8Array);
              s.notify();
            } else if (e.case === "end") {
              const error = s.killRequested ? "killed" : e.value.exitCode !== 0 || !e.value.exited ? (e.value.error ?? e.value.status) : undefined;
              s.rec = { ...s.rec, running: false, exit_code: e.value.exitCode, ended_at: new Date().toISOString(), ...(error ? { error } : {}) };
              this.persist(s);
              s.notify();
              log.debug({ exitCode: e.value.exitCode }, "session ended");
              return;
            }
          }
          if (pending) {
            // A Start must begin with its start event; never start the command twice.
            pending.done(new ControlPlaneError("internal", "the sandbox ended the session's stream before the command started"));
            s.rec = { ...s.rec, running: false };
            return;
          }
          detached = true;
        } catch (err) {
          if (abort.signal.aborted) return;
          const ce = ConnectError.from(err);
          if (pending) {
            pending.done(new ControlPlaneError(ce.code === Code.InvalidArgument ? "invalid" : "internal", `the session could not start: ${ce.rawMessage}`));
            s.rec = { ...s.rec, running: false };
            return;
          }
          if (ce.code === Code.NotFound) {
            s.rec = {
              ...s.rec,
              running: false,
              exit_code: null,
              ended_at: new Date().toISOString(),
              error: "the session's process ended while the control plane was not attached to it: its exit code is unknown",
            };
            this.persist(s);
            s.notify();
            return;
          }
          detached = true;
          log.debug({ err: ce.message }, "session stream interrupted: re-attaching");
        }
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(5_000, backoff * 2);
      }
    };
    void run()
      .catch((err: unknown) => log.error({ err }, "session attachment failed"))
      .finally(() => {
        if (this.aborts.get(s) === abort) {
          this.aborts.delete(s);
          s.attached = false;
        }
      });
  }

  private target(sandboxId: string): EnvdTarget | undefined {
    const t = this.o.manager.runningEndpoint(sandboxId);
    return t ? { endpoint: t.endpoint, token: t.sandbox.envdAccessToken } : undefined;
  }

  /** A session, or not_found (for the sandbox when it does not exist, else for the session). */
  get(sandboxId: string, sessionId: string): Session {
    const s = this.bySandbox.get(sandboxId)?.get(sessionId);
    if (s) return s;
    this.o.manager.get(sandboxId);
    throw new ControlPlaneError("not_found", `session '${sessionId}' not found in sandbox '${sandboxId}': list them with GET /sandboxes/${sandboxId}/exec`);
  }

  list(sandboxId: string): Session[] {
    return [...(this.bySandbox.get(sandboxId)?.values() ?? [])];
  }

  /** The key that started a session (audit). */
  keyOf(sandboxId: string, sessionId: string): string | undefined {
    return this.bySandbox.get(sandboxId)?.get(sessionId)?.rec.key_id;
  }

  /**
   * Output from `offset`, or (without one) from where the last poll stopped;
   * moves that cursor. Text never ends inside a UTF-8 character: its first
   * bytes wait for the next poll.
   */
  read(s: Session, o: { offset?: number; maxBytes: number; encoding: "utf-8" | "base64" }): OutputRead {
    const asked = o.offset ?? s.rec.cursor;
    const { data, from, dropped } = s.spool.read(asked, o.maxBytes);
    let bytes = data;
    const end = s.spool.end;
    if (o.encoding === "utf-8") {
      const tail = incompleteUtf8Tail(bytes);
      // Keep a partial character back unless nothing will ever complete it.
      if (tail && (s.rec.running || from + bytes.length < end)) bytes = bytes.subarray(0, bytes.length - tail);
    }
    const next = from + bytes.length;
    if (next > s.rec.cursor) {
      s.rec = { ...s.rec, cursor: next };
      this.persist(s);
    }
    const marker = dropped > 0 && o.encoding === "utf-8" ? `[locale2b: ${dropped} bytes of output were dropped here: the session's buffer keeps the last ${this.o.limits.bufferBytes} bytes; poll more often]\n` : "";
    return {
      session_id: s.id,
      output: o.encoding === "base64" ? bytes.toString("base64") : marker + new TextDecoder().decode(bytes),
      encoding: o.encoding,
      offset: from,
      next_offset: next,
      dropped_bytes: dropped,
      has_more: next < end,
      running: s.rec.running,
      exit_code: s.rec.exit_code,
    };
  }

  async input(s: Session, target: EnvdTarget, data: Uint8Array): Promise<void> {
    if (!s.rec.running || s.rec.pid === undefined) {
      throw new ControlPlaneError("conflict", `session '${s.id}' has ended (exit code ${s.rec.exit_code}): start a new one`);
    }
    await this.o.rpc
      .client(Process, target)
      .sendInput({ process: { selector: { case: "pid", value: s.rec.pid } }, input: { input: { case: "pty", value: data } } })
      .catch((err: unknown) => {
        const ce = ConnectError.from(err);
        if (ce.code === Code.NotFound) throw new ControlPlaneError("conflict", `session '${s.id}' has ended: start a new one`);
        throw new ControlPlaneError("internal", `writing to session '${s.id}' failed: ${ce.rawMessage}`);
      });
  }

  /** Resizes the session's PTY (a terminal window changed size); kept for a re-attachment's record. */
  async resize(s: Session, target: EnvdTarget, cols: number, rows: number): Promise<void> {
    if (!s.rec.running || s.rec.pid === undefined) {
      throw new ControlPlaneError("conflict", `session '${s.id}' has ended (exit code ${s.rec.exit_code}): start a new one`);
    }
    await this.o.rpc
      .client(Process, target)
      .update({ process: { selector: { case: "pid", value: s.rec.pid } }, pty: { size: { cols, rows } } })
      .catch((err: unknown) => {
        const ce = ConnectError.from(err);
        if (ce.code === Code.NotFound) throw new ControlPlaneError("conflict", `session '${s.id}' has ended: start a new one`);
        throw new ControlPlaneError("internal", `resizing session '${s.id}' failed: ${ce.rawMessage}`);
      });
    s.rec.cols = cols;
    s.rec.rows = rows;
    this.persist(s);
  }

  /** Kills the session's process tree; resolves once its end was seen (or after `waitMs`). */
  async kill(s: Session, target: EnvdTarget, waitMs = 5_000): Promise<void> {
    if (!s.rec.running || s.rec.pid === undefined) return;
    s.killRequested = true;
    if (!s.attached) this.attach(s, undefined, true);
    await killProcessTree(this.o.rpc.client(Process, target), target.endpoint.sandboxId, s.rec.pid);
    const deadline = Date.now() + waitMs;
    while (s.rec.running && Date.now() < deadline) await s.waitForChange(deadline - Date.now());
  }

  /** Running sessions, for metrics. */
  runningCount(): number {
    let n = 0;
    for (const m of this.bySandbox.values()) for (const s of m.values()) if (s.rec.running) n++;
    return n;
  }

  /** Stops copying output (sessions keep running in their sandboxes: the next start re-attaches). */
  close(): void {
    this.closed = true;
    this.unsubscribe?.();
    for (const a of this.aborts.values()) a.abort();
    for (const m of this.bySandbox.values()) for (const s of m.values()) s.spool.close();
  }
}
