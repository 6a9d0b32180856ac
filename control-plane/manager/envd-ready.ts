// An instance's envd coming up: after a start (waited for, then /init) and
// after a resume (/init at once, as a resumed envd usually answers; a guest
// slow to come back gets its readiness budget and a second /init).
import type { Instance } from "../runtimes/runtime.js";
import type { EnvdClient } from "../transport/envd-client.js";
import type { Endpoint } from "../transport/endpoint.js";
import { pushInit } from "./records.js";
import type { SandboxRecord } from "../domain/sandbox.js";

/** Until the instance's envd answers, within its readiness budget; a VM is not dialed before its vsock is set up (Instance.vsockReady). */
export function waitForEnvd(envd: EnvdClient, endpoint: Endpoint, inst: Instance, defaultMs: number): Promise<void> {
  const ms = Math.max(defaultMs, inst.readyTimeoutMs ?? 0);
  return envd.waitReady(endpoint, ms, () => inst.alive(), () => inst.vsockReady?.() ?? true);
}

/** /init to a resumed instance: at once, and when that fails (a VM under emulation on a busy host), again once its envd answers. */
export async function initResumed(envd: EnvdClient, rec: SandboxRecord, endpoint: Endpoint, inst: Instance, defaultMs: number): Promise<void> {
  await pushInit(envd, rec, endpoint, inst).catch(async () => {
    await waitForEnvd(envd, endpoint, inst, defaultMs);
    await pushInit(envd, rec, endpoint, inst);
  });
}
