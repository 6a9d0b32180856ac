import { performance } from "node:perf_hooks";
import { WORKSPACE_METADATA } from "../../workspace/metadata.js";
import { DEFAULT_TEMPLATE } from "../../workspace/workspaces.js";
import { Fields, readJsonObject } from "../rest/body.js";
import type { WsContext } from "./context.js";
import { sendJson, WsError } from "./errors.js";
import { sandboxInfo, statusOf } from "./serialize.js";

function stringMap(f: Fields, name: string): Record<string, string> {
  return f.stringMap(name) ?? {};
}

/**
 * POST /sandboxes {template?, memory_mb?, vcpu_count?, workspace_id?,
 * timeout_seconds?, env_vars?, secret_env_vars?, metadata?}: a new sandbox,
 * or (with the workspace_id of a live one) that workspace's sandbox, resumed
 * when paused. 201 when created, 200 when found.
 */
export async function createSandbox({ req, res, deps, audit }: WsContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const workspaceId = f.string("workspace_id") || undefined;
  const template = f.string("template") || DEFAULT_TEMPLATE;
  const memoryMB = f.int("memory_mb", 64, 1024 * 1024) ?? 512;
  const cpuCount = f.int("vcpu_count", 1, 64) ?? 1;
  const idleTimeoutSeconds = f.int("timeout_seconds", 1, 24 * 3600) ?? deps.settings.idleTimeoutSeconds;
  const envVars = stringMap(f, "env_vars");
  const secretEnv = stringMap(f, "secret_env_vars");
  const metadata = stringMap(f, "metadata");
  for (const k of Object.keys(metadata)) {
    if (k.startsWith("locale2b.")) throw new WsError(400, "invalid_request", `metadata key '${k}': keys starting with 'locale2b.' are the server's`);
  }
  for (const k of Object.keys(secretEnv)) if (k in envVars) throw new WsError(400, "invalid_request", `env var '${k}' is in both env_vars and secret_env_vars`);
  audit.details = { workspace_id: workspaceId, template, env_vars: Object.keys(envVars), secret_env_vars: Object.keys(secretEnv) };
  const t0 = performance.now();
  const { sandbox, outcome } = await deps.workspaces.createOrResume({
    ...(workspaceId ? { workspaceId } : {}),
    template,
    memoryMB,
    cpuCount,
    idleTimeoutSeconds,
    envVars: { ...envVars, ...secretEnv },
    secretEnvNames: Object.keys(secretEnv),
    metadata,
  });
  deps.redactor.remember(sandbox);
  audit.sandboxId = sandbox.id;
  audit.details.outcome = outcome;
  deps.log.info({ sandboxId: sandbox.id, workspaceId, outcome, ms: Math.round(performance.now() - t0) }, "workspace sandbox ready");
  sendJson(res, outcome === "created" ? 201 : 200, { ...sandboxInfo(sandbox), outcome });
}

/** GET /sandboxes[?workspace_id=&status=]: every live sandbox (whichever API made it), oldest first. */
export async function listSandboxes({ res, query, deps }: WsContext): Promise<void> {
  const workspaceId = query.get("workspace_id");
  const status = query.get("status");
  if (status && status !== "running" && status !== "paused") throw new WsError(400, "invalid_request", `invalid status '${status}': use running or paused`);
  let all = deps.manager.list(workspaceId ? { metadata: { [WORKSPACE_METADATA]: workspaceId } } : {});
  if (status) all = all.filter((r) => statusOf(r) === status);
  sendJson(res, 200, { sandboxes: all.map(sandboxInfo) });
}

export async function getSandbox({ res, params, deps }: WsContext): Promise<void> {
  sendJson(res, 200, sandboxInfo(deps.manager.get(params.id!)));
}

/** DELETE /sandboxes/{id}: kills it; its sessions end and its workspace is gone. */
export async function deleteSandbox({ res, params, deps }: WsContext): Promise<void> {
  const rec = deps.manager.get(params.id!);
  await deps.manager.kill(rec.id);
  sendJson(res, 200, { sandbox_id: rec.id, status: "stopped", deleted: true, workspace_id: rec.metadata[WORKSPACE_METADATA] ?? null });
}

/** POST /sandboxes/{id}/pause: processes and files are kept; any call resumes it. */
export async function pauseSandbox({ res, params, deps }: WsContext): Promise<void> {
  const rec = await deps.manager.pause(params.id!);
  sendJson(res, 200, { sandbox_id: rec.id, status: statusOf(rec) });
}

/** POST /sandboxes/{id}/resume: SandboxInfo; resuming a running sandbox only pushes its timeout back. */
export async function resumeSandbox({ res, params, deps }: WsContext): Promise<void> {
  const rec = deps.manager.get(params.id!);
  const idle = Number(rec.metadata["locale2b.idle_timeout_s"]) || deps.settings.idleTimeoutSeconds;
  const { sandbox } = await deps.manager.connect(rec.id, idle);
  sendJson(res, 200, sandboxInfo(sandbox));
}
