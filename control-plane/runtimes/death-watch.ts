/**
 * How an instance tells the manager it died on its own, shared by every
 * runtime: a liveness poll every `intervalMs` (for instances that are not our
 * children, e.g. after a restart) plus immediate reports (a child's exit
 * event), delivered once to every onExit listener. kill() and detach() stop
 * it: a sandbox we kill, or stop watching, does not "die".
 */
export class DeathWatch {
  private readonly listeners: ((reason: string) => void)[] = [];
  private readonly timer: NodeJS.Timeout;
  private stopped = false;
  private reason: string | undefined;
  /** A death being reported once its clean-up has settled (reportAfter). */
  private reporting = false;

  constructor(intervalMs: number, poll: () => void) {
    this.timer = setInterval(poll, intervalMs);
    this.timer.unref();
  }

  /** Dead already, killed or detached: nothing more to report. */
  get over(): boolean {
    return this.stopped || this.reporting || this.reason !== undefined;
  }

  get dead(): boolean {
    return this.reason !== undefined;
  }

  /** Reports the death once (ignored once over) to the listeners, now and later ones. */
  report(reason: string): void {
    if (this.over) return;
    this.reason = reason;
    clearInterval(this.timer);
    for (const l of this.listeners) l(reason);
  }

  /**
   * Reports the death once `cleanup` has settled, whatever its outcome (over
   * from now on): what the sandbox held on the host (a VM's tap) is gone
   * before anyone hears it died, so a caller that ends its process on the
   * news leaves nothing behind.
   */
  reportAfter(cleanup: Promise<unknown>, reason: string): void {
    if (this.over) return;
    this.reporting = true;
    clearInterval(this.timer);
    void cleanup.catch(() => undefined).finally(() => {
      this.reporting = false;
      this.report(reason);
    });
  }

  /** No more polling and no report (kill, or the server stopping: detach). */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  onExit(listener: (reason: string) => void): void {
    this.listeners.push(listener);
    const reason = this.reason;
    if (reason !== undefined) queueMicrotask(() => listener(reason));
  }
}
