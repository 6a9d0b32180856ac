import { Process, Signal } from "../../../gen/ts/process/process_pb.js";
import { readJsonObject, Fields } from "../rest/body.js";
import type { WsContext } from "./context.js";
import { sendJson, WsError } from "./errors.js";

/** Signals a client may send, by name (envd's process.Process/SendSignal takes these two). */
const SIGNALS: Record<string, Signal> = { SIGTERM: Signal.SIGTERM, SIGKILL: Signal.SIGKILL };

/**
 * GET /sandboxes/{id}/processes: the processes envd started and still runs
 * (envd's process.Process/List): pid, cmd, args, cwd and tag each, by pid.
 * Their environment is left out (it may hold secrets the list has no need of).
 */
export async function listProcesses(ctx: WsContext): Promise<void> {
  const { target } = await ctx.deps.workspaces.target(ctx.params.id!);
  const r = await ctx.deps.rpc.client(Process, target).list({});
  const processes = r.processes
    .map((p) => ({ pid: p.pid, cmd: p.config?.cmd ?? "", args: p.config?.args ?? [], cwd: p.config?.cwd ?? null, tag: p.tag ?? null }))
    .sort((a, b) => a.pid - b.pid);
  sendJson(ctx.res, 200, { sandbox_id: ctx.params.id, processes });
}

/** POST /sandboxes/{id}/processes/{pid}/signal {signal: "SIGTERM"|"SIGKILL"}: envd's SendSignal to that process. */
export async function signalProcess(ctx: WsContext): Promise<void> {
  const rawPid = ctx.params.pid!;
  const pid = Number(rawPid);
  if (!/^[1-9][0-9]{0,9}$/.test(rawPid) || pid > 2 ** 32 - 1) throw new WsError(400, "invalid_request", `'${rawPid}' is not a process id: use a pid as GET /sandboxes/{id}/processes lists it`);
  const name = new Fields(await readJsonObject(ctx.req)).string("signal") ?? "SIGTERM";
  const signal = SIGNALS[name];
  if (signal === undefined) throw new WsError(400, "invalid_request", `field 'signal' must be SIGTERM (the default) or SIGKILL, got '${name}'`);
  const { target } = await ctx.deps.workspaces.target(ctx.params.id!);
  await ctx.deps.rpc.client(Process, target).sendSignal({ process: { selector: { case: "pid", value: pid } }, signal });
  ctx.audit.details = { ...ctx.audit.details, pid, signal: name };
  sendJson(ctx.res, 200, { sandbox_id: ctx.params.id, pid, signal: name });
}
