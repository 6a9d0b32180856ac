import type { WsContext } from "./context.js";
import { sendJson } from "./errors.js";

/** GET /health: no key needed. */
export async function health({ res, deps }: WsContext): Promise<void> {
  const live = deps.manager.list();
  sendJson(res, 200, {
    status: "ok",
    version: deps.version,
    runtime: deps.runtime,
    sandboxes: {
      running: live.filter((r) => r.state === "running").length,
      paused: live.filter((r) => r.state === "paused").length,
    },
  });
}
