import type { SandboxRecord, SandboxState } from "../../domain/sandbox.js";
import type { InstanceStats } from "../../runtimes/runtime.js";

/** Deprecated in the spec but required by Python's parser; infra answers this constant. */
export const CLIENT_ID = "6532622b";

export type ApiState = "running" | "paused";

/** RFC 3339 (UTC, milliseconds). */
export function rfc3339(ms: number): string {
  return new Date(ms).toISOString();
}

/**
 * The two states the API knows. A sandbox being created or resumed is
 * reported as running (a connect returns it running); one being paused as
 * paused (that is where it is headed, and connect resumes it).
 */
export function apiState(state: SandboxState): ApiState {
  return state === "pausing" || state === "paused" ? "paused" : "running";
}

/** The manager states an API state filter stands for (`creating` is never listed: its id was not handed out yet). */
export function managerStates(state: ApiState): SandboxState[] {
  return state === "paused" ? ["pausing", "paused"] : ["running", "resuming"];
}

/** `trafficAccessToken` only matters when public traffic is off (then clients must send it). */
function trafficToken(rec: SandboxRecord): string | null {
  return rec.network?.allowPublicTraffic === false ? rec.trafficAccessToken : null;
}

/** `Sandbox`: the create / connect / resume result. */
export function toSandbox(rec: SandboxRecord, domain: string): Record<string, unknown> {
  return {
    templateID: rec.templateId,
    sandboxID: rec.id,
    ...(rec.alias ? { alias: rec.alias } : {}),
    clientID: CLIENT_ID,
    envdVersion: rec.envdVersion,
    envdAccessToken: rec.envdAccessToken,
    trafficAccessToken: trafficToken(rec),
    // The SDKs' getHost(port) → `<port>-<id>.<domain>`; envd traffic keeps going to E2B_SANDBOX_URL, which wins.
    domain,
  };
}

/** `ListedSandbox`: an entry of GET /v2/sandboxes. */
export function toListed(rec: SandboxRecord): Record<string, unknown> {
  return {
    templateID: rec.templateId,
    ...(rec.alias ? { alias: rec.alias } : {}),
    sandboxID: rec.id,
    clientID: CLIENT_ID,
    startedAt: rfc3339(rec.startedAt),
    endAt: rfc3339(rec.endAt),
    cpuCount: rec.cpuCount,
    memoryMB: rec.memoryMB,
    diskSizeMB: rec.diskSizeMB,
    metadata: rec.metadata,
    state: apiState(rec.state),
    envdVersion: rec.envdVersion,
    volumeMounts: [],
  };
}

/** `SandboxDetail`: GET /sandboxes/{id}. */
export function toDetail(rec: SandboxRecord, domain: string): Record<string, unknown> {
  const network = rec.network;
  return {
    ...toListed(rec),
    envdAccessToken: rec.envdAccessToken,
    allowInternetAccess: rec.allowInternetAccess,
    domain,
    ...(network ? { network } : {}),
    lifecycle: { onTimeout: rec.onTimeout, autoResume: rec.autoResume },
    ...(rec.volumeMounts?.length ? { volumeMounts: rec.volumeMounts.map((m) => ({ name: m.name, path: m.path })) } : {}),
  };
}

/** `SandboxMetric`: one sample. The runtimes do not report page cache separately, so memCache is 0. */
export function toMetric(stats: InstanceStats, now = Date.now()): Record<string, unknown> {
  return {
    timestamp: rfc3339(now),
    timestampUnix: Math.floor(now / 1000),
    cpuCount: stats.cpuCount,
    cpuUsedPct: Math.round(stats.cpuUsedPct * 100) / 100,
    memUsed: Math.round(stats.memUsedBytes),
    memTotal: Math.round(stats.memTotalBytes),
    memCache: 0,
    diskUsed: Math.round(stats.diskUsedBytes),
    diskTotal: Math.round(stats.diskTotalBytes),
  };
}
