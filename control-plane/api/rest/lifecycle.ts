import { performance } from "node:perf_hooks";
import { Fields, readJsonObject } from "./body.js";
import { HttpError, sendJson, sendNoContent } from "./errors.js";
import { parseNetworkUpdate } from "./network-body.js";
import type { RestContext, Route } from "./router.js";
import { toSandbox } from "./serialize.js";

/** POST /sandboxes/{id}/timeout {timeout}: the sandbox now ends `timeout` seconds from now (shorter or longer). */
async function setTimeoutRoute({ req, res, params, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const timeout = f.int("timeout");
  if (timeout === undefined) throw new HttpError(400, "field 'timeout' is required");
  await deps.manager.setTimeout(params.sandboxID!, timeout);
  sendNoContent(res);
}

/** POST /sandboxes/{id}/refreshes {duration?}: extends only; at most an hour per the spec. */
async function refresh({ req, res, params, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const duration = f.int("duration", 0, 3600) ?? 15;
  await deps.manager.refresh(params.sandboxID!, duration);
  sendNoContent(res);
}

/** PUT /sandboxes/{id}/network (SandboxNetworkUpdateConfig): 204; 409 when the sandbox's rules cannot be changed. */
async function updateNetwork({ req, res, params, deps }: RestContext): Promise<void> {
  const { rules, allowInternetAccess } = parseNetworkUpdate(await readJsonObject(req));
  await deps.manager.updateNetwork(params.sandboxID!, rules, allowInternetAccess);
  sendNoContent(res);
}

/** POST /sandboxes/{id}/pause {memory?}: 204, 409 when already paused; memory: false pauses to disk (files only). */
async function pause({ req, res, params, deps }: RestContext): Promise<void> {
  const memory = new Fields(await readJsonObject(req)).bool("memory");
  await deps.manager.pause(params.sandboxID!, memory);
  sendNoContent(res);
}

/**
 * Connect: a running sandbox gets its timeout extended (200), a paused one
 * is resumed (201). v1 (`ConnectSandbox`) requires `timeout`; v2 defaults it to 300 s.
 */
function connect(v2: boolean) {
  return async ({ req, res, params, deps }: RestContext): Promise<void> => {
    const f = new Fields(await readJsonObject(req));
    let timeout = f.int("timeout");
    const memory = f.bool("memory");
    if (timeout === undefined) {
      if (!v2) throw new HttpError(400, "field 'timeout' is required");
      timeout = 300;
    }
    const started = performance.now();
    const { sandbox, resumed } = await deps.manager.connect(params.sandboxID!, timeout, memory);
    if (resumed) deps.metrics.observeResume((performance.now() - started) / 1000);
    sendJson(res, resumed ? 201 : 200, toSandbox(sandbox, deps.publicDomain));
  };
}

/** Deprecated POST /sandboxes/{id}/resume {timeout? (15), autoPause?}: 201, 409 when not paused. */
async function resume({ req, res, params, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const timeout = f.int("timeout") ?? 15;
  const autoPause = f.bool("autoPause");
  const memory = f.bool("memory");
  const started = performance.now();
  const sandbox = await deps.manager.resume(params.sandboxID!, timeout, autoPause, memory);
  deps.metrics.observeResume((performance.now() - started) / 1000);
  sendJson(res, 201, toSandbox(sandbox, deps.publicDomain));
}

export const lifecycleRoutes: Route[] = [
  { method: "POST", path: "/sandboxes/:sandboxID/timeout", handler: setTimeoutRoute },
  { method: "PUT", path: "/sandboxes/:sandboxID/network", handler: updateNetwork },
  { method: "POST", path: "/sandboxes/:sandboxID/refreshes", handler: refresh },
  { method: "POST", path: "/sandboxes/:sandboxID/pause", handler: pause },
  { method: "POST", path: "/sandboxes/:sandboxID/connect", handler: connect(false) },
  { method: "POST", path: "/v2/sandboxes/:sandboxID/connect", handler: connect(true) },
  { method: "POST", path: "/sandboxes/:sandboxID/resume", handler: resume },
];
