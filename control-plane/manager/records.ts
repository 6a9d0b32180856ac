// The pieces of a create that need no manager state: the new record, the
// capacity check, and the settings pushed to envd after start and resume.
import { ENVD_VERSION } from "../../envd/version.js";
import { TRUST_ENV } from "./egress-trust.js";
import type { Instance } from "../runtimes/runtime.js";
import type { EnvdClient } from "../transport/envd-client.js";
import type { Endpoint } from "../transport/endpoint.js";
import { deriveToken } from "./ids.js";
import type { ManagerLimits } from "./options.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { CreateSandboxInput, SandboxRecord } from "../domain/sandbox.js";
import type { WarmShape } from "./warm-pool.js";

/** A new sandbox's record, in state creating. */
export function newRecord(seed: Buffer, id: string, input: CreateSandboxInput, shape: WarmShape, timeout: number, runtime: string): SandboxRecord {
  const now = Date.now();
  return {
    id,
    templateId: input.templateId,
    ...(input.alias ? { alias: input.alias } : {}),
    ...(input.boot ? { boot: input.boot } : {}),
    state: "creating",
    metadata: input.metadata ?? {},
    envVars: input.envVars ?? {},
    cpuCount: shape.cpuCount,
    memoryMB: shape.memoryMB,
    diskSizeMB: shape.diskSizeMB,
    startedAt: now,
    endAt: now + timeout * 1000,
    onTimeout: input.autoPause ? "pause" : "kill",
    autoResume: input.autoResume ?? false,
    ...(input.autoPause && input.autoPauseMemory === false ? { pauseMemory: false } : {}),
    envdVersion: ENVD_VERSION,
    envdAccessToken: deriveToken(seed, "envd", id),
    trafficAccessToken: deriveToken(seed, "sandbox-traffic", id),
    allowInternetAccess: input.allowInternetAccess ?? true,
    network: input.network,
    runtime,
    runtimeData: {},
    ...(input.volumeMounts?.length ? { volumeMounts: input.volumeMounts } : {}),
  };
}

/**
 * A client's timeout in whole seconds, or `invalid` when it is not positive
 * (0 too, with `zero`: "end now", as E2B's POST /timeout takes it) or past the limit.
 */
export function checkTimeout(seconds: number, maxSeconds: number, zero = false): number {
  if (!Number.isFinite(seconds) || seconds < 0 || (seconds === 0 && !zero)) {
    throw new ControlPlaneError("invalid", `timeout must be a positive number of seconds${zero ? " or 0 (end now)" : ""}, got ${seconds}`);
  }
  if (seconds > maxSeconds) throw new ControlPlaneError("invalid", `Timeout cannot be greater than ${maxSeconds / 3600} hours`);
  return Math.ceil(seconds);
}

/** Refuses a new sandbox past the host's sandbox limit, memory budget or CPU budget (`live`: its sandboxes now). */
export function checkCapacity(live: SandboxRecord[], limits: ManagerLimits, shape: { memoryMB: number; cpuCount: number }): void {
  const { maxSandboxes, memoryBudgetMB, cpuBudget } = limits;
  const { memoryMB, cpuCount } = shape;
  if (live.length >= maxSandboxes) {
    throw new ControlPlaneError(
      "capacity",
      `sandbox limit reached: ${live.length} of ${maxSandboxes} sandboxes exist. Kill or pause some, or start the server with a higher --max-sandboxes`,
      5,
    );
  }
  const used = live.reduce((sum, r) => sum + r.memoryMB, 0);
  if (used + memoryMB > memoryBudgetMB) {
    throw new ControlPlaneError(
      "capacity",
      `memory budget exhausted: ${used} MiB of ${memoryBudgetMB} MiB in use and ${memoryMB} MiB requested. Kill some sandboxes, or raise --memory-budget-mb`,
      5,
    );
  }
  const cpus = live.reduce((sum, r) => sum + r.cpuCount, 0);
  if (cpus + cpuCount > cpuBudget) {
    throw new ControlPlaneError(
      "capacity",
      `CPU budget exhausted: ${cpus} of ${cpuBudget} vCPUs given to sandboxes and ${cpuCount} requested. Kill some sandboxes, or raise --cpu-budget`,
      5,
    );
  }
}

/**
 * Pushes env vars, token, default user/workdir and the time to envd (after
 * start and resume). `currentToken`: the token envd holds now, when it is not
 * this sandbox's (a memory snapshot's envd holds its source sandbox's).
 */
export async function pushInit(envd: EnvdClient, rec: SandboxRecord, endpoint: Endpoint, inst: Instance, currentToken = rec.envdAccessToken): Promise<void> {
  const res = await envd.request(endpoint, {
    method: "POST",
    path: "/init",
    headers: { "x-access-token": currentToken },
    body: {
      // A sandbox with request rules trusts the egress proxy's CA (egress-trust.ts); its own env vars may say otherwise.
      envVars: { ...(Object.keys(rec.network?.rules ?? {}).length ? TRUST_ENV : {}), ...rec.boot?.envs, ...rec.envVars },
      accessToken: rec.envdAccessToken,
      timestamp: new Date().toISOString(),
      ...((rec.boot?.user ?? inst.defaultUser) ? { defaultUser: rec.boot?.user ?? inst.defaultUser } : {}),
      ...((rec.boot?.workdir ?? inst.defaultWorkdir) ? { defaultWorkdir: rec.boot?.workdir ?? inst.defaultWorkdir } : {}),
    },
  });
  if (res.status !== 204) throw new Error(`envd /init answered ${res.status}: ${res.body.toString().slice(0, 200)}`);
}
