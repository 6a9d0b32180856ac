import { availableParallelism, freemem, totalmem } from "node:os";
import type { WsContext } from "./context.js";
import { sendJson } from "./errors.js";

/**
 * GET /capacity: this host's sandboxes against its limits (--max-sandboxes,
 * --memory-budget-mb: what creates are checked against), its warm pools,
 * sandbox starts in progress and waiting, and the machine's memory and CPUs.
 * One read of the manager's table: cheap enough to poll.
 */
export async function capacity({ res, deps }: WsContext): Promise<void> {
  const live = deps.manager.list();
  const limits = deps.manager.limits;
  const by = (state: string) => live.filter((r) => r.state === state).length;
  const admission = deps.manager.admissionStats();
  sendJson(res, 200, {
    runtime: deps.runtime,
    sandboxes: { total: live.length, running: by("running"), paused: by("paused"), max: limits.maxSandboxes },
    memory_mb: { used: live.reduce((sum, r) => sum + r.memoryMB, 0), budget: limits.memoryBudgetMB },
    vcpus: { used: live.reduce((sum, r) => sum + r.cpuCount, 0), budget: limits.cpuBudget },
    warm_pools: deps.manager.warmPools(),
    starts: { running: admission.running, queued: admission.queued, rejected: admission.rejected, concurrent: admission.limits.concurrent, queue: admission.limits.queue },
    host: { memory_total_bytes: totalmem(), memory_free_bytes: freemem(), cpus: availableParallelism() },
  });
}
