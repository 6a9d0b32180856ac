// Sandbox timeouts: setting and extending a sandbox's end (POST /timeout,
// /refreshes), and, once a running sandbox's endAt has passed, its timeout
// action (kill or pause, the manager's `expire`) under its lock. Checked
// every second, and at once for a timeout set to 0 ("end now").
import type { Logger } from "pino";
import type { SandboxTable } from "./sandbox-table.js";
import type { KeyedLock } from "./locks.js";
import { checkTimeout } from "./records.js";
import type { SandboxRecord } from "../domain/sandbox.js";

const EVERY_MS = 1_000;

export interface TimeoutsOptions {
  table: SandboxTable;
  locks: KeyedLock;
  log: Logger;
  /** The longest timeout a client may set. */
  maxSeconds: number;
  /** The record of a live sandbox (throws not_found). */
  get(id: string): SandboxRecord;
  /** Runs the timeout action of `rec` (a running sandbox past its end), under its lock. */
  expire(rec: SandboxRecord): Promise<void>;
}

export class Timeouts {
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: TimeoutsOptions) {}

  start(): void {
    this.timer = setInterval(() => void this.reap(), EVERY_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** The sandbox now ends `seconds` from now (shorter or longer; 0: its timeout action runs now). */
  async set(id: string, seconds: number): Promise<SandboxRecord> {
    const timeout = checkTimeout(seconds, this.o.maxSeconds, true);
    const rec = await this.o.locks.run(id, async () => this.save({ ...this.o.get(id), endAt: Date.now() + timeout * 1000 }));
    if (timeout === 0) void this.reap();
    return rec;
  }

  /** The sandbox ends `seconds` from now unless it already ends later (extends only). */
  extend(id: string, seconds: number): Promise<SandboxRecord> {
    const timeout = checkTimeout(seconds, this.o.maxSeconds);
    return this.o.locks.run(id, async () => {
      const rec = this.o.get(id);
      return this.save({ ...rec, endAt: Math.max(rec.endAt, Date.now() + timeout * 1000) });
    });
  }

  private save(rec: SandboxRecord): SandboxRecord {
    return this.o.table.put(rec);
  }

  /** Ends every running sandbox past its end (one that was extended or changed meanwhile is left). */
  async reap(): Promise<void> {
    const now = Date.now();
    for (const rec of this.o.table.list({ states: ["running"] })) {
      if (rec.endAt > now) continue;
      await this.o.locks
        .run(rec.id, async () => {
          const cur = this.o.table.get(rec.id);
          if (!cur || cur.state !== "running" || cur.endAt > Date.now()) return;
          await this.o.expire(cur);
        })
        .catch((err: unknown) => this.o.log.error({ err, sandboxId: rec.id }, "timeout handling failed"));
    }
  }
}
