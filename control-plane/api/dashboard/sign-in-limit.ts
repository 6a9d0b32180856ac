/** How many wrong keys one client address may send in a window before sign-in answers 429. */
export interface SignInLimits {
  /** Failed sign-ins allowed per address within `windowMs`. */
  failures: number;
  windowMs: number;
}

export const DEFAULT_SIGN_IN_LIMITS: SignInLimits = { failures: 10, windowMs: 60_000 };

/** Addresses tracked at most (a flood of spoofed-looking sources cannot grow the map without bound). */
const MAX_ADDRESSES = 10_000;

/**
 * Sign-in rate limiting per client address: each wrong key is remembered
 * for `windowMs`; with `failures` of them in the window the address is
 * refused (429, Retry-After: until the oldest one leaves the window) without
 * its key being checked. A good key clears the address's record.
 */
export class SignInLimiter {
  private readonly byAddress = new Map<string, number[]>();

  constructor(
    private readonly limits: SignInLimits = DEFAULT_SIGN_IN_LIMITS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Seconds the address must wait before its next try, or 0 when it may try now. */
  retryAfterSeconds(address: string): number {
    const recent = this.recent(address);
    if (recent.length < this.limits.failures) return 0;
    const oldest = recent[recent.length - this.limits.failures]!;
    return Math.max(1, Math.ceil((oldest + this.limits.windowMs - this.now()) / 1000));
  }

  failed(address: string): void {
    const recent = this.recent(address);
    recent.push(this.now());
    // Only the last `failures` matter for the decision.
    if (recent.length > this.limits.failures) recent.splice(0, recent.length - this.limits.failures);
    this.byAddress.delete(address);
    this.byAddress.set(address, recent);
    if (this.byAddress.size > MAX_ADDRESSES) this.byAddress.delete(this.byAddress.keys().next().value!);
  }

  succeeded(address: string): void {
    this.byAddress.delete(address);
  }

  private recent(address: string): number[] {
    const t = this.now();
    const list = (this.byAddress.get(address) ?? []).filter((at) => at + this.limits.windowMs > t);
    if (list.length) this.byAddress.set(address, list);
    else this.byAddress.delete(address);
    return list;
  }
}
