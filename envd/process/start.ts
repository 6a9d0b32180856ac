import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { statSync } from "node:fs";
import { performance } from "node:perf_hooks";
import type { StartRequest, StartResponseSchema } from "../../gen/ts/process/process_pb.js";
import { requestUser } from "../auth/user.js";
import type { EnvdContext } from "../context.js";
import { resolvePath } from "../paths.js";
import type { User } from "../users.js";
import { ProcessHandle } from "./handler/process-handle.js";
import type { ProcessRegistry } from "./registry.js";
import { startEvent, subscriptionEvents } from "./stream.js";

const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** PATH, HOME, USER, LOGNAME; then the sandbox's env vars; then the request's (later wins). */
export function processEnv(ctx: EnvdContext, user: User, envs: Record<string, string>): Record<string, string> {
  return {
    PATH: process.env.PATH || DEFAULT_PATH,
    HOME: user.home,
    USER: user.name,
    LOGNAME: user.name,
    ...ctx.state.processEnv(),
    ...envs,
  };
}

/** uid/gid to run as: only root can switch; anyone else runs processes as itself. */
function credentials(user: User): { uid?: number; gid?: number } {
  const self = process.getuid?.();
  if (self === 0) return { uid: user.uid, gid: user.gid };
  if (self !== user.uid) {
    throw new ConnectError(
      `envd runs as uid ${self} and cannot start processes as '${user.name}' (uid ${user.uid}): run envd as root to serve other users`,
      Code.PermissionDenied,
    );
  }
  return {};
}

/** A NUL byte cannot be passed to execve: refuse it up front, naming the field. */
function checkNoNul(config: { cmd: string; args: string[]; envs: Record<string, string> }): void {
  const fields: [string, string][] = [["process.cmd", config.cmd], ...config.args.map((a, i): [string, string] => [`process.args[${i}]`, a])];
  for (const [k, v] of Object.entries(config.envs)) fields.push([`process.envs key ${JSON.stringify(k)}`, k], [`process.envs[${JSON.stringify(k)}]`, v]);
  for (const [field, value] of fields) {
    if (value.includes("\0")) {
      throw new ConnectError(`${field} contains a NUL byte, which no command, argument or variable can hold: remove it`, Code.InvalidArgument);
    }
  }
}

function resolveCwd(ctx: EnvdContext, user: User, cwd: string | undefined): string {
  const dir = resolvePath(cwd ?? "", user, ctx.state.defaultWorkdir);
  let isDir = false;
  try {
    isDir = statSync(dir).isDirectory();
  } catch {
    // reported below
  }
  if (!isDir) throw new ConnectError(`cwd '${dir}' does not exist`, Code.InvalidArgument);
  return dir;
}

export async function* start(
  ctx: EnvdContext,
  registry: ProcessRegistry,
  req: StartRequest,
  hctx: HandlerContext,
): AsyncGenerator<MessageInitShape<typeof StartResponseSchema>> {
  const config = req.process;
  if (!config || !config.cmd) throw new ConnectError("process.cmd is required", Code.InvalidArgument);
  checkNoNul(config);
  const user = requestUser(ctx, hctx);
  const pty = req.pty?.size ? { cols: req.pty.size.cols, rows: req.pty.size.rows } : undefined;
  let cwd = config.cwd ?? "";
  let handle: ProcessHandle;
  try {
    cwd = resolveCwd(ctx, user, config.cwd);
    if (req.pty && !pty) throw new ConnectError("pty.size is required for a PTY process", Code.InvalidArgument);
    handle = await ProcessHandle.spawn({
      cmd: config.cmd,
      args: config.args,
      env: processEnv(ctx, user, config.envs),
      cwd,
      ...credentials(user),
      stdin: req.stdin ?? true,
      pty,
    });
  } catch (err) {
    const error = err instanceof ConnectError ? err.rawMessage : String(err);
    ctx.activity.emit({ case: "processFailed", value: { cmd: config.cmd, args: config.args, cwd, user: user.name, tag: req.tag, error } });
    throw err;
  }
  // Subscribe before any output can be read, so the first bytes reach this stream.
  const sub = handle.mux.subscribe();
  registry.add({ handle, config, tag: req.tag });
  const lifetime = hctx.timeoutMs();
  if (lifetime !== undefined) handle.setLifetime(lifetime);
  const spawnedAt = performance.now();
  const pid = handle.pid;
  ctx.activity.emit({ case: "processStarted", value: { pid, cmd: config.cmd, args: config.args, cwd, user: user.name, tag: req.tag, pty: !!pty } });
  ctx.log.debug({ pid, cmd: config.cmd, user: user.name, pty: !!pty, tag: req.tag }, "process started");
  void handle.done.then((exit) => {
    const durationMs = BigInt(Math.round(performance.now() - spawnedAt));
    ctx.activity.emit({ case: "processEnded", value: { pid, tag: req.tag, ...exit, durationMs } });
    ctx.log.debug({ pid, ...exit }, "process ended");
  });

  yield { event: startEvent(handle.pid) };
  for await (const event of subscriptionEvents(sub, () => handle.exit, hctx)) yield { event };
}
