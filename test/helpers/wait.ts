// Waiting for an eventual state in tests: poll until it holds, fail with what
// was awaited. Never a timing assertion: the deadline only bounds a hang.

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** How long waitFor polls by default. */
export const WAIT_MS = 30_000;

export interface WaitOptions {
  /** Give up after this long (default WAIT_MS). */
  timeoutMs?: number;
  /** Poll this often (default 25 ms). */
  everyMs?: number;
}

/**
 * Polls `cond` until it holds. `what` names the awaited state; as a function
 * it is evaluated on failure, so it can show what was seen instead.
 */
export async function waitFor(cond: () => boolean | Promise<boolean>, what: string | (() => string), o: WaitOptions = {}): Promise<void> {
  const timeoutMs = o.timeoutMs ?? WAIT_MS;
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === "string" ? what : what()}`);
    await sleep(o.everyMs ?? 25);
  }
}

/**
 * Polls `check` until it returns a value (not undefined) and returns it; a
 * check that throws is tried again, and the last error is in the timeout's message.
 */
export async function waitForValue<T>(what: string, check: () => Promise<T | undefined> | T | undefined, o: WaitOptions = {}): Promise<T> {
  const timeoutMs = o.timeoutMs ?? WAIT_MS;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ""}`);
    await sleep(o.everyMs ?? 200);
  }
}
