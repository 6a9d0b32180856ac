// When a sandbox runs out of memory, the kernel's OOM killer must pick the
// process that used it, never envd (without envd the whole sandbox is gone).
// Every process envd starts inherits a higher oom_score_adj: envd raises its
// own just around the (synchronous) fork, so the child is born with it and no
// grandchild can slip out before it is set, then goes back to where it was.
import { readFileSync, writeFileSync } from "node:fs";

const FILE = "/proc/self/oom_score_adj";
/** What started processes get (the kernel's range is -1000..1000; envd stays at its own, usually 0). */
export const CHILD_OOM_SCORE_ADJ = 500;

let own: number | undefined | null;

function ownScore(): number | null {
  if (own === undefined) {
    try {
      own = Number(readFileSync(FILE, "utf8").trim());
    } catch {
      own = null; // no /proc: nothing to do
    }
  }
  return own;
}

function write(value: number): boolean {
  try {
    writeFileSync(FILE, String(value));
    return true;
  } catch {
    return false;
  }
}

/** Runs `spawn` (which must fork synchronously) so that its child starts with CHILD_OOM_SCORE_ADJ. */
export function withChildOomScore<T>(spawn: () => T): T {
  const base = ownScore();
  if (base === null || base >= CHILD_OOM_SCORE_ADJ || !write(CHILD_OOM_SCORE_ADJ)) return spawn();
  try {
    return spawn();
  } finally {
    write(base);
  }
}

/** Whether started processes get a higher score than envd's own (for a spawner that sets it in the child). */
export function raisesChildOomScore(): boolean {
  const base = ownScore();
  return base !== null && base < CHILD_OOM_SCORE_ADJ;
}
