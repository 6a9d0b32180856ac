import "./polyfill/base64.js";
import { spawn } from "node:child_process";
import type { IncomingMessage, ServerResponse } from "node:http";
import { ActivityLog } from "./activity/log.js";
import type { EnvdContext } from "./context.js";
import { createLogger, type Logger } from "./log.js";
import { H1H2cServer } from "./server/h1-h2c-server.js";
import { listenerFor, parseListen, type Listener } from "./server/listen.js";
import { createEnvdHandler } from "./server/router.js";
import { EnvdState } from "./state.js";
import { pickDefaultUser, UserDb } from "./users.js";
import { ENVD_VERSION } from "./version.js";
import { codeCacheState } from "./code-cache.js";

export interface EnvdOptions {
  /** `tcp://host:port` or `unix:///path`; several may be given. */
  listen: string[];
  defaultUser?: string;
  defaultWorkdir?: string;
  accessToken?: string;
  envVars?: Record<string, string>;
  /** Directory holding passwd and group (default /etc). */
  etc?: string;
  log?: Logger;
}

export interface RunningEnvd {
  /** Where it listens, as `tcp://127.0.0.1:49983` or `unix:///path`. */
  addresses: string[];
  /** `http://host:port` of the first TCP listener, if any. */
  url: string | undefined;
  context: EnvdContext;
  close(): Promise<void>;
}

/** Starts envd: one handler served on every listener, each speaking every protocol. */
export async function startEnvd(opts: EnvdOptions): Promise<RunningEnvd> {
  const log = opts.log ?? createLogger({ component: "envd" });
  const users = new UserDb(opts.etc);
  const state = new EnvdState({
    defaultUser: opts.defaultUser ?? pickDefaultUser(users),
    defaultWorkdir: opts.defaultWorkdir,
    accessToken: opts.accessToken,
    envVars: opts.envVars,
  });
  const context: EnvdContext = { state, users, log, activity: new ActivityLog() };
  const handler = createEnvdHandler(context);
  const handle = (req: unknown, res: unknown) => handler.handle(req as IncomingMessage, res as ServerResponse);

  const server = new H1H2cServer(handle);
  const listeners: Listener[] = [];
  const addresses: string[] = [];
  try {
    for (const url of opts.listen) {
      const listener = listenerFor(parseListen(url));
      addresses.push(await listener.listen((socket) => server.accept(socket)));
      listeners.push(listener);
    }
  } catch (err) {
    await Promise.all(listeners.map((l) => l.close()));
    await handler.close();
    throw err;
  }
  const tcp = addresses.find((a) => a.startsWith("tcp://"));
  log.info({ addresses, version: ENVD_VERSION, defaultUser: state.defaultUser, codeCache: codeCacheState() }, "envd listening");
  // The first spawn of a fresh Node process is slow (~20 ms): pay it now, not on the user's first command.
  spawn("/bin/true", { stdio: "ignore" }).on("error", () => undefined);
  return {
    addresses,
    url: tcp ? `http://${tcp.slice("tcp://".length)}` : undefined,
    context,
    async close() {
      await handler.close();
      const closed = Promise.all(listeners.map((l) => l.close()));
      server.close();
      await closed;
    },
  };
}
