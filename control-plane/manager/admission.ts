import { availableParallelism } from "node:os";
import { ControlPlaneError } from "../domain/errors.js";

/** How many sandbox starts run at once, and how many more may wait for a turn. */
export interface AdmissionLimits {
  /** Starts in progress at once (runtime start until envd answers). */
  concurrent: number;
  /** Starts that may wait for a turn; one more is refused with 429 + Retry-After. */
  queue: number;
}

/**
 * By default one start per CPU (a start is mostly CPU: namespaces, a copy of
 * the rootfs, Node booting envd) and 16 waiting per start slot.
 */
export function defaultAdmissionLimits(given: Partial<AdmissionLimits> = {}, cpus = availableParallelism()): AdmissionLimits {
  const concurrent = given.concurrent ?? Math.max(1, cpus);
  return { concurrent, queue: given.queue ?? 16 * concurrent };
}

export interface AdmissionStats {
  limits: AdmissionLimits;
  running: number;
  queued: number;
  rejected: number;
}

/**
 * Admission control for sandbox starts: at most `concurrent` run, up to
 * `queue` more wait their turn in arrival order, and any beyond that are
 * refused at once with `capacity` (429) and a Retry-After estimated from how
 * long starts take. A start's readiness deadline begins when it is admitted,
 * so time spent queued never counts against it.
 */
export class Admission {
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  /** Background starts waiting for a slot no create wants. */
  private readonly background: (() => void)[] = [];
  private rejected = 0;
  /** Moving average of a start's duration, in seconds (for Retry-After). */
  private avgSeconds = 1;

  constructor(readonly limits: AdmissionLimits) {
    if (!(limits.concurrent >= 1) || !(limits.queue >= 0)) {
      throw new Error(`invalid admission limits: ${JSON.stringify(limits)}`);
    }
  }

  stats(): AdmissionStats {
    return { limits: this.limits, running: this.running, queued: this.waiting.length, rejected: this.rejected };
  }

  /** Seconds until a turn is likely free for one more start: the queue ahead of it, drained `concurrent` at a time. */
  retryAfterSeconds(): number {
    const rounds = Math.ceil((this.waiting.length + 1) / this.limits.concurrent);
    return Math.min(60, Math.max(1, Math.ceil(rounds * this.avgSeconds)));
  }

  /**
   * Runs `fn` once admitted; rejects with `capacity` when the queue is full.
   * A `background` start (a warm-pool refill) is never refused and only gets
   * a slot no create is waiting for.
   */
  async run<T>(fn: () => Promise<T>, opts: { background?: boolean } = {}): Promise<T> {
    if (this.running < this.limits.concurrent && (!opts.background || this.waiting.length === 0)) {
      this.running++;
    } else if (opts.background) {
      await new Promise<void>((resolve) => this.background.push(resolve));
    } else if (this.waiting.length < this.limits.queue) {
      // The slot is handed over by the finishing start: `running` stays as it is.
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    } else {
      this.rejected++;
      throw new ControlPlaneError(
        "capacity",
        `too many sandbox creates at once: ${this.running} starting and ${this.waiting.length} waiting (the server starts ${this.limits.concurrent} at a time and queues ${this.limits.queue}; see --max-concurrent-creates and --create-queue). Retry later`,
        this.retryAfterSeconds(),
      );
    }
    const started = Date.now();
    try {
      return await fn();
    } finally {
      this.avgSeconds = 0.8 * this.avgSeconds + 0.2 * ((Date.now() - started) / 1000);
      const next = this.waiting.shift() ?? this.background.shift();
      if (next) next();
      else this.running--;
    }
  }
}
