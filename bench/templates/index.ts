import { loadavg } from "node:os";
import type { GoalResult } from "../lib/goal.js";
import { benchBuild } from "./build.js";
import { benchCodeInterpreterCreate, benchRunCode } from "./code-interpreter.js";
import { benchStartCommand } from "./start-command.js";

/**
 * `npm run bench -- templates`: templates end to end with the real SDKs (issue 21).
 * Each part starts its own `locale2b serve` on a fresh data dir (the image cache is
 * shared: LOCALE2B_IMAGES_DIR), deletes the templates and sandboxes it made, and is
 * skipped with a printed reason where it cannot run.
 */
export async function benchTemplates(): Promise<GoalResult[]> {
  const parts: [string, () => Promise<GoalResult[]>][] = [
    ["template build", benchBuild],
    ["start command: create -> first output", benchStartCommand],
    ["runCode round trip", benchRunCode],
    ["code-interpreter-v1 create -> first runCode", benchCodeInterpreterCreate],
  ];
  const only = (process.env.LOCALE2B_BENCH_TEMPLATE_PARTS ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  const results: GoalResult[] = [];
  for (const [i, [name, fn]] of parts.entries()) {
    if (only.length && !only.includes(String(i + 1))) continue;
    try {
      results.push(...(await fn()));
    } catch (err) {
      console.log(`\ntemplates: ${name}: FAILED, no numbers: ${err instanceof Error ? err.message : String(err)}`);
      if (process.env.LOCALE2B_BENCH_DEBUG && err instanceof Error) console.log(err.stack);
      results.push({ benchmark: "templates", metric: name, value: "could not run", goal: "-", ok: false });
    }
  }
  console.log(`\ntemplates: load average at the end ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
  return results;
}
