// A fleet process's recurring chores (a node's heartbeat and Lease, following
// its Node's cordon, an API replica's look at Leases and Nodes): run once at
// start, then every few seconds, one run at a time.

export class Periodic {
  private timer: NodeJS.Timeout | undefined;
  private last: Promise<void> = Promise.resolve();

  /** `task` must not reject: it logs its own failures (the next run tries again). */
  constructor(
    private readonly task: () => Promise<void>,
    private readonly everyMs: number,
  ) {}

  /** One run, after the one under way (if any). */
  run(): Promise<void> {
    this.last = this.last.then(this.task);
    return this.last;
  }

  /** The first run, awaited; then one every `everyMs` (the timer keeps no process alive). */
  async start(): Promise<void> {
    await this.run();
    this.timer = setInterval(() => void this.run(), this.everyMs);
    this.timer.unref();
  }

  /** No more runs; resolves when the one under way has ended. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.last;
  }
}
