/** One goal a benchmark checks, for the summary at the end of a run. */
export interface GoalResult {
  benchmark: string;
  metric: string;
  /** The measured value, formatted. */
  value: string;
  /** The goal, e.g. "<= 1.5x". */
  goal: string;
  ok: boolean;
  /**
   * Printed instead of met/MISSED when the goal does not apply to this run,
   * e.g. "KVM goal, not applicable under TCG" (then `ok` is ignored).
   */
  notApplicable?: string;
}
