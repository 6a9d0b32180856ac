import type { Logger } from "pino";
import { SECRET_ENV_METADATA } from "../audit/redact.js";
import { KeyedLock } from "../manager/locks.js";
import type { SandboxManager } from "../manager/sandbox-manager.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { SandboxRecord } from "../domain/sandbox.js";
import type { Endpoint } from "../transport/endpoint.js";
import type { EnvdTarget } from "../transport/envd-rpc.js";
import { WORKSPACE_METADATA } from "./metadata.js";

/** Metadata keys of sandboxes the workspace API made. */
export const WORKSPACE_API_METADATA = "locale2b.api";
export const IDLE_TIMEOUT_METADATA = "locale2b.idle_timeout_s";

/** The workspace API's name for the default image. */
export const DEFAULT_TEMPLATE = "default";
const DEFAULT_TEMPLATE_ID = "base";

export interface WorkspaceCreate {
  workspaceId?: string;
  template: string;
  memoryMB: number;
  cpuCount: number;
  /** Idle seconds before the sandbox is paused (it resumes on the next call). */
  idleTimeoutSeconds: number;
  envVars: Record<string, string>;
  /** Names among envVars whose values are secret (never logged or audited). */
  secretEnvNames: string[];
  metadata: Record<string, string>;
}

export type CreateOutcome = "created" | "existing" | "resumed";

const WORKSPACE_ID = /^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$/;

/** The template id a workspace template name stands for (`default` is the default image). */
export function templateIdOf(template: string): string {
  return template === DEFAULT_TEMPLATE ? DEFAULT_TEMPLATE_ID : template;
}

/** The workspace API's name of a sandbox's template. */
export function templateNameOf(rec: SandboxRecord): string {
  return rec.templateId === DEFAULT_TEMPLATE_ID ? DEFAULT_TEMPLATE : rec.templateId;
}

/**
 * Workspaces over the sandbox manager. A workspace is the sandbox whose
 * metadata names its workspace_id: creating with the id of a live one
 * returns it (resuming it when paused), so a harness that restarts finds
 * its files again. Sandboxes made here pause (not die) when idle and resume
 * on the next call, through any API.
 */
export class Workspaces {
  private readonly locks = new KeyedLock();
  /** Routes of running sandboxes, so a busy harness does not read the store per call (as the proxy's EndpointCache). */
  private readonly endpoints = new Map<string, { sandbox: SandboxRecord; endpoint: Endpoint; expires: number }>();
  private generation = 0;

  constructor(
    private readonly manager: SandboxManager,
    private readonly log: Logger,
    private readonly endpointTtlMs = 2_000,
  ) {
    manager.events.subscribe({}, (e) => {
      this.endpoints.delete(e.sandbox.id);
      this.generation++;
    });
  }

  /** The live sandbox of a workspace, if any (the newest, should there be several). */
  find(workspaceId: string): SandboxRecord | undefined {
    return this.manager.list({ metadata: { [WORKSPACE_METADATA]: workspaceId } }).at(-1);
  }

  async createOrResume(input: WorkspaceCreate): Promise<{ sandbox: SandboxRecord; outcome: CreateOutcome }> {
    const id = input.workspaceId;
    if (id !== undefined && !WORKSPACE_ID.test(id)) {
      throw new ControlPlaneError("invalid", `invalid workspace_id '${id.slice(0, 80)}': use 1-128 letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit`);
    }
    if (id === undefined) return { sandbox: await this.create(input), outcome: "created" };
    return this.locks.run(`ws:${id}`, async () => {
      const found = this.find(id);
      if (!found) return { sandbox: await this.create(input), outcome: "created" as const };
      const { sandbox, resumed } = await this.manager.connect(found.id, this.idleTimeout(found, input.idleTimeoutSeconds));
      this.log.info({ sandboxId: sandbox.id, workspaceId: id, resumed }, "workspace found");
      return { sandbox, outcome: resumed ? ("resumed" as const) : ("existing" as const) };
    });
  }

  private create(input: WorkspaceCreate): Promise<SandboxRecord> {
    return this.manager.create({
      templateId: templateIdOf(input.template),
      timeout: input.idleTimeoutSeconds,
      metadata: {
        ...input.metadata,
        [WORKSPACE_API_METADATA]: "workspace",
        [IDLE_TIMEOUT_METADATA]: String(input.idleTimeoutSeconds),
        ...(input.workspaceId ? { [WORKSPACE_METADATA]: input.workspaceId } : {}),
        ...(input.secretEnvNames.length ? { [SECRET_ENV_METADATA]: input.secretEnvNames.join(",") } : {}),
      },
      envVars: input.envVars,
      autoPause: true,
      autoResume: true,
      cpuCount: input.cpuCount,
      memoryMB: input.memoryMB,
    });
  }

  private idleTimeout(rec: SandboxRecord, fallback: number): number {
    const n = Number(rec.metadata[IDLE_TIMEOUT_METADATA]);
    return Number.isInteger(n) && n > 0 ? n : fallback;
  }

  /**
   * Where a workspace call goes: the sandbox's envd, resuming the sandbox
   * first when it is paused and may auto-resume (every workspace sandbox).
   * A sandbox made here gets its idle timeout pushed back.
   */
  async target(id: string): Promise<{ sandbox: SandboxRecord; target: EnvdTarget }> {
    const now = Date.now();
    let routed = this.endpoints.get(id);
    if (!routed || routed.expires <= now) {
      const gen = this.generation;
      const rec = this.manager.get(id);
      // A paused workspace resumes for its idle timeout (endpoint() would give it its whole past lifetime).
      if (rec.state === "paused" && rec.metadata[WORKSPACE_API_METADATA] === "workspace") {
        await this.manager.connect(id, this.idleTimeout(rec, 3600));
      }
      try {
        routed = { ...(await this.manager.endpoint(id)), expires: now + this.endpointTtlMs };
      } catch (err) {
        if (err instanceof ControlPlaneError && err.kind === "unavailable") {
          throw new ControlPlaneError("conflict", `sandbox '${id}' is paused: resume it first (POST /sandboxes/${id}/resume)`);
        }
        throw err;
      }
      // A lifecycle event during the lookup may have made it stale: use it, do not keep it.
      if (this.generation === gen) this.endpoints.set(id, routed);
    }
    const { sandbox, endpoint } = routed;
    this.touch(sandbox);
    return { sandbox, target: { endpoint, token: sandbox.envdAccessToken } };
  }

  /** Pushes a workspace sandbox's idle timeout back, at most every half timeout. */
  private touch(rec: SandboxRecord): void {
    if (rec.metadata[WORKSPACE_API_METADATA] !== "workspace") return;
    const idle = this.idleTimeout(rec, 0);
    if (!idle || rec.endAt - Date.now() > (idle * 1000) / 2) return;
    const cached = this.endpoints.get(rec.id);
    if (cached) cached.sandbox = { ...rec, endAt: Date.now() + idle * 1000 };
    void this.manager.refresh(rec.id, idle).catch((err: unknown) => this.log.debug({ sandboxId: rec.id, err: (err as Error).message }, "idle timeout refresh failed"));
  }
}
