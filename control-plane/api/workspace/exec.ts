import { randomBytes } from "node:crypto";
import { Process } from "../../../gen/ts/process/process_pb.js";
import { capCommand, controlTags, EXEC_TAG_PREFIX } from "../../events/envd-activity.js";
import { ControlPlaneError } from "../../domain/errors.js";
import { execBlocking } from "../../workspace/exec.js";
import { WORKSPACE_DIR } from "../../workspace/workspace-dir.js";
import { Fields, readJsonObject } from "../rest/body.js";
import type { WsContext } from "./context.js";
import { sendJson, WsError } from "./errors.js";
import { sandboxPath } from "./paths.js";
import { startSessionFrom } from "./sessions.js";

const MAX_TIMEOUT_S = 24 * 3600;

export interface ExecFields {
  command: string;
  cwd: string;
  cwdDefaulted: boolean;
  env: Record<string, string>;
  secretEnv: Record<string, string>;
}

/** The fields exec and exec/start share: command, working_dir, env, secret_env. */
export function execFields(f: Fields, commandRequired = true): ExecFields {
  const command = commandRequired ? f.requiredString("command") : (f.string("command") ?? "");
  const rawCwd = f.string("working_dir");
  const env = f.stringMap("env") ?? {};
  const secretEnv = f.stringMap("secret_env") ?? {};
  return { command, cwd: rawCwd ? sandboxPath(rawCwd, "working_dir") : WORKSPACE_DIR, cwdDefaulted: !rawCwd, env, secretEnv };
}

/** envd's "cwd '…' does not exist" as what to do about it. */
export function cwdError(err: unknown, x: ExecFields): never {
  if (err instanceof ControlPlaneError || err instanceof Error) {
    if (/cwd '.*' does not exist/.test(err.message)) {
      throw new WsError(
        400,
        "invalid_working_dir",
        x.cwdDefaulted
          ? `this sandbox has no ${WORKSPACE_DIR} (the server log says why): pass working_dir`
          : `working_dir '${x.cwd}' does not exist in the sandbox: create it first (files/write makes parent directories) or pass another`,
      );
    }
  }
  throw err;
}

/**
 * POST /sandboxes/{id}/exec {command, timeout_seconds?: 300, working_dir?:
 * "/workspace", env?, secret_env?, max_output_bytes?, background?,
 * session_id?}: runs `command` through bash and answers CommandResult once
 * it ends, or when it times out (killed, `success: false`). With
 * `background: true` it starts a session instead and answers {session_id}.
 */
export async function exec(ctx: WsContext): Promise<void> {
  const { req, res, params, deps, audit, signal } = ctx;
  const body = await readJsonObject(req);
  const f = new Fields(body);
  if (f.bool("background")) return startSessionFrom(ctx, f);
  const x = execFields(f);
  const timeoutS = f.int("timeout_seconds", 1, MAX_TIMEOUT_S) ?? 300;
  const maxOutput = f.int("max_output_bytes", 0, 256 * 1024 * 1024) ?? deps.settings.execOutputBytes;
  const { sandbox, target } = await deps.workspaces.target(params.id!);
  deps.redactor.add(sandbox.id, Object.values(x.secretEnv));
  const execId = randomBytes(6).toString("hex");
  const tag = controlTags.issue(sandbox.id, `${EXEC_TAG_PREFIX}${execId}`);
  audit.details = { exec_id: execId, command: capCommand(x.command), working_dir: x.cwd, timeout_seconds: timeoutS, env: Object.keys(x.env), secret_env: Object.keys(x.secretEnv) };
  const client = deps.rpc.client(Process, target);
  const out = await execBlocking(
    client,
    { command: x.command, cwd: x.cwd, env: { ...x.env, ...x.secretEnv }, timeoutMs: timeoutS * 1000, maxOutputBytes: maxOutput, tag, sandboxId: sandbox.id },
    signal,
  ).catch((err: unknown) => cwdError(err, x));
  if (out.timedOut) deps.watchers.noteEndReason(tag, `timed out after ${timeoutS} s: killed`);
  let error: string | null = null;
  if (out.timedOut) error = `command timed out after ${timeoutS} s and was killed`;
  else if (out.aborted) error = "the client went away: the command was killed";
  else if (out.exitCode < 0) error = `command was killed (${out.endError ?? "signal"})`;
  Object.assign(audit.details, { exit_code: out.exitCode, timed_out: out.timedOut, duration_ms: out.durationMs });
  if (signal.aborted) return;
  sendJson(res, 200, {
    success: out.exitCode === 0 && !out.timedOut,
    exit_code: out.exitCode,
    stdout: out.stdout,
    stderr: out.stderr,
    duration_ms: out.durationMs,
    error,
    timed_out: out.timedOut,
    truncated: out.truncated,
    exec_id: execId,
  });
}
