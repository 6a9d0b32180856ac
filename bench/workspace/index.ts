import type { GoalResult } from "../lib/goal.js";
import { benchWorkspaceEvents } from "./events.js";
import { benchWorkspaceExec } from "./exec.js";
import { benchWorkspaceSession } from "./session.js";

const PARTS: Record<string, () => Promise<GoalResult[]>> = {
  "1": benchWorkspaceExec,
  "2": benchWorkspaceSession,
  "3": benchWorkspaceEvents,
};

/** `npm run bench -- workspace`: the workspace API (LOCALE2B_BENCH_WORKSPACE_PARTS=1,3 picks parts). */
export async function benchWorkspace(): Promise<GoalResult[]> {
  const parts = (process.env.LOCALE2B_BENCH_WORKSPACE_PARTS ?? "1,2,3").split(",").map((s) => s.trim()).filter(Boolean);
  const out: GoalResult[] = [];
  for (const p of parts) {
    const run = PARTS[p];
    if (!run) throw new Error(`LOCALE2B_BENCH_WORKSPACE_PARTS: unknown part '${p}' (1 exec, 2 session, 3 events)`);
    out.push(...(await run()));
  }
  return out;
}
