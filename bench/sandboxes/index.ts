import type { GoalResult } from "../lib/goal.js";
import { benchCreate } from "./create.js";
import { benchExecProxy } from "./exec.js";
import { benchMemory } from "./memory.js";
import { benchSnapshots } from "./snapshots.js";
import { benchStreamProxy } from "./stream.js";

/**
 * `npm run bench -- sandboxes`: the control plane (`locale2b serve`, process
 * runtime) end to end: create → first command output, exec round trip
 * through the proxy, host memory per idle sandbox, proxied stream
 * throughput. Every part starts its own server on a fresh data dir and
 * deletes every sandbox it made, also on an error or Ctrl-C.
 */

/** All five parts; one that cannot run is reported (and MISSED in the summary), the others still run. */
export async function benchControlPlane(): Promise<GoalResult[]> {
  console.log(
    "\nnote: the control plane benchmarks start `locale2b serve` (process runtime) on a fresh data dir each; " +
      "on a shared, noisy machine compare the ratios to the baselines of the same run.",
  );
  const parts: [string, () => Promise<GoalResult[]>][] = [
    ["create -> first output", benchCreate],
    ["exec via proxy", benchExecProxy],
    ["memory per idle sandbox", benchMemory],
    ["stream via proxy", benchStreamProxy],
    ["filesystem snapshots and fork", benchSnapshots],
  ];
  const only = (process.env.LOCALE2B_BENCH_SANDBOX_PARTS ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  const results: GoalResult[] = [];
  let failures = 0;
  let ran = 0;
  for (const [i, [name, fn]] of parts.entries()) {
    if (only.length && !only.includes(String(i + 1))) continue;
    ran++;
    try {
      results.push(...(await fn()));
    } catch (err) {
      failures++;
      console.log(`\nsandboxes: ${name}: FAILED, no numbers: ${err instanceof Error ? err.message : String(err)}`);
      if (process.env.LOCALE2B_BENCH_DEBUG && err instanceof Error) console.log(err.stack);
      results.push({ benchmark: "sandboxes", metric: name, value: "could not run", goal: "-", ok: false });
    }
  }
  if (ran > 0 && failures === ran) throw new Error("no part of the control plane benchmark could run");
  return results;
}
