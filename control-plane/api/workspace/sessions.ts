import { capCommand } from "../../events/envd-activity.js";
import { Fields, readJsonObject } from "../rest/body.js";
import type { Session } from "../../sessions/session.js";
import type { WsContext } from "./context.js";
import { sendJson, WsError } from "./errors.js";
import { cwdError, execFields } from "./exec.js";
import { SseWriter } from "./sse.js";

function status(s: Session): Record<string, unknown> {
  const r = s.rec;
  return {
    session_id: r.session_id,
    sandbox_id: r.sandbox_id,
    command: r.command,
    working_dir: r.cwd,
    running: r.running,
    exit_code: r.exit_code,
    error: r.error ?? null,
    pid: r.pid ?? null,
    started_at: r.started_at,
    ended_at: r.ended_at ?? null,
    output_bytes: s.spool.end,
    unread_bytes: Math.max(0, s.spool.end - r.cursor),
  };
}

/** exec/start, and exec with background: true. */
export async function startSessionFrom(ctx: WsContext, f: Fields): Promise<void> {
  const { res, params, deps, audit, key } = ctx;
  const x = execFields(f, false);
  const sessionId = f.string("session_id") || undefined;
  const cols = f.int("cols", 10, 1000);
  const rows = f.int("rows", 2, 1000);
  const { sandbox, target } = await deps.workspaces.target(params.id!);
  deps.redactor.add(sandbox.id, Object.values(x.secretEnv));
  audit.details = { session_id: sessionId, command: capCommand(x.command), working_dir: x.cwd, env: Object.keys(x.env), secret_env: Object.keys(x.secretEnv) };
  const s = await deps.sessions
    .create({
      sandboxId: sandbox.id,
      target,
      command: x.command,
      cwd: x.cwd,
      ...(sessionId ? { sessionId } : {}),
      env: { ...x.env, ...x.secretEnv },
      ...(cols ? { cols } : {}),
      ...(rows ? { rows } : {}),
      ...(key ? { keyId: key.id } : {}),
    })
    .catch((err: unknown) => cwdError(err, x));
  audit.details.session_id = s.id;
  sendJson(res, 200, { ...status(s), session_id: s.id });
}

/** POST /sandboxes/{id}/exec/start {command?, working_dir?, session_id?, env?, secret_env?, cols?, rows?}: {session_id} at once. */
export async function startSession(ctx: WsContext): Promise<void> {
  return startSessionFrom(ctx, new Fields(await readJsonObject(ctx.req)));
}

function session(ctx: WsContext): Session {
  ctx.audit.details = { session_id: ctx.params.session };
  return ctx.deps.sessions.get(ctx.params.id!, ctx.params.session!);
}

function intQuery(q: URLSearchParams, name: string, min: number, max: number): number | undefined {
  const raw = q.get(name);
  if (raw === null || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new WsError(400, "invalid_request", `query '${name}' must be an integer from ${min} to ${max}, got '${raw}'`);
  return n;
}

function encodingOf(q: URLSearchParams): "utf-8" | "base64" {
  const e = q.get("encoding") ?? "utf-8";
  if (e !== "utf-8" && e !== "utf8" && e !== "base64") throw new WsError(400, "invalid_request", `query 'encoding' must be utf-8 or base64, got '${e}'`);
  return e === "base64" ? "base64" : "utf-8";
}

/**
 * GET /sandboxes/{id}/exec/{session}/output[?offset=&max_bytes=&wait_ms=&encoding=]:
 * the output since the last poll (or from `offset`), up to max_bytes
 * (1 MiB). With wait_ms it waits that long for output to come when there
 * is none yet (long poll).
 */
export async function sessionOutput(ctx: WsContext): Promise<void> {
  const s = session(ctx);
  const offset = intQuery(ctx.query, "offset", 0, Number.MAX_SAFE_INTEGER);
  const maxBytes = intQuery(ctx.query, "max_bytes", 1, 16 * 1024 * 1024) ?? 1024 * 1024;
  const waitMs = intQuery(ctx.query, "wait_ms", 0, 60_000) ?? 0;
  const encoding = encodingOf(ctx.query);
  const from = offset ?? s.rec.cursor;
  if (waitMs > 0 && s.spool.end <= from) await s.waitForChange(waitMs, ctx.signal);
  if (ctx.signal.aborted) return;
  sendJson(ctx.res, 200, ctx.deps.sessions.read(s, { ...(offset !== undefined ? { offset } : {}), maxBytes, encoding }));
}

/** POST /sandboxes/{id}/exec/{session}/input {input, is_base64?}: written to the session's PTY as typed. */
export async function sessionInput(ctx: WsContext): Promise<void> {
  const f = new Fields(await readJsonObject(ctx.req));
  const input = f.string("input");
  if (input === undefined) throw new WsError(400, "invalid_request", "field 'input' is required: the text to type (add \\n to press Enter)");
  const data = f.bool("is_base64") ? Buffer.from(input, "base64") : Buffer.from(input, "utf8");
  const s = session(ctx);
  const { target } = await ctx.deps.workspaces.target(ctx.params.id!);
  await ctx.deps.sessions.input(s, target, data);
  ctx.audit.details!.bytes = data.length;
  sendJson(ctx.res, 200, { session_id: s.id, bytes: data.length });
}

/** POST /sandboxes/{id}/exec/{session}/resize {cols, rows}: the session's PTY takes that size (a terminal window resized). */
export async function sessionResize(ctx: WsContext): Promise<void> {
  const f = new Fields(await readJsonObject(ctx.req));
  const cols = f.int("cols", 1, 1000);
  const rows = f.int("rows", 1, 1000);
  if (cols === undefined || rows === undefined) throw new WsError(400, "invalid_request", "fields 'cols' and 'rows' are required: the terminal's size in characters (1-1000)");
  const s = session(ctx);
  const { target } = await ctx.deps.workspaces.target(ctx.params.id!);
  await ctx.deps.sessions.resize(s, target, cols, rows);
  ctx.audit.details!.cols = cols;
  ctx.audit.details!.rows = rows;
  sendJson(ctx.res, 200, { session_id: s.id, cols, rows });
}

/** GET /sandboxes/{id}/exec/{session}/status: {running, exit_code, ...}. */
export async function sessionStatus(ctx: WsContext): Promise<void> {
  sendJson(ctx.res, 200, status(session(ctx)));
}

/** DELETE /sandboxes/{id}/exec/{session}: kills the session's processes; answers once it ended. */
export async function killSession(ctx: WsContext): Promise<void> {
  const s = session(ctx);
  const wasRunning = s.rec.running;
  if (wasRunning) {
    const { target } = await ctx.deps.workspaces.target(ctx.params.id!);
    await ctx.deps.sessions.kill(s, target);
  }
  sendJson(ctx.res, 200, { ...status(s), killed: wasRunning });
}

/** GET /sandboxes/{id}/exec: the sandbox's sessions, running and ended. */
export async function listSessions(ctx: WsContext): Promise<void> {
  const rec = ctx.deps.manager.get(ctx.params.id!);
  sendJson(ctx.res, 200, { sessions: ctx.deps.sessions.list(rec.id).map(status) });
}

/**
 * GET /sandboxes/{id}/exec/{session}/stream[?offset=]: the output as
 * server-sent events (`output` {offset, next_offset, output}, whose id is
 * next_offset, then `exit` {exit_code}), read from the session's buffer at
 * the client's pace: a slow client falls behind (and is told what was
 * dropped), it never holds the session or the server's memory up. An
 * EventSource that reconnects resumes at its Last-Event-ID. It does not move
 * the poll cursor.
 */
export async function streamSession(ctx: WsContext): Promise<void> {
  const s = session(ctx);
  const lastId = ctx.req.headers["last-event-id"];
  const resume = typeof lastId === "string" && /^\d+$/.test(lastId) ? Number(lastId) : undefined;
  let offset = intQuery(ctx.query, "offset", 0, Number.MAX_SAFE_INTEGER) ?? resume ?? 0;
  const sse = new SseWriter(ctx.res, ctx.signal);
  const decoder = new TextDecoder();
  while (!sse.closed) {
    const { data, from, dropped } = s.spool.read(offset, 64 * 1024);
    if (dropped > 0 && !(await sse.send("dropped", { offset, dropped_bytes: dropped }))) break;
    if (data.length > 0) {
      if (!(await sse.send("output", { offset: from, next_offset: from + data.length, output: decoder.decode(data, { stream: true }) }, from + data.length))) break;
      offset = from + data.length;
      continue;
    }
    offset = Math.max(offset, from);
    if (!s.rec.running) {
      await sse.send("exit", { exit_code: s.rec.exit_code, error: s.rec.error ?? null });
      break;
    }
    await s.waitForChange(15_000, ctx.signal);
  }
  sse.end();
}
