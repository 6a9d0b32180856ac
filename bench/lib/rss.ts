import { readFileSync } from "node:fs";
import { Worker } from "node:worker_threads";

/** A process's resident set size in bytes (VmRSS in /proc/<pid>/status). */
export function readRss(pid: number): number {
  return readStatusKb(readFileSync(`/proc/${pid}/status`, "utf8"), "VmRSS") * 1024;
}

/** A process's resident set in its two parts, in bytes: private (anonymous: heap, stacks) and file-backed (its binary's pages, shared). */
export function readRssParts(pid: number): { anon: number; file: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return { anon: readStatusKb(status, "RssAnon") * 1024, file: readStatusKb(status, "RssFile") * 1024 };
}

/** A process's peak resident set size since it started, in bytes (VmHWM). */
export function readHwm(pid: number): number {
  return readStatusKb(readFileSync(`/proc/${pid}/status`, "utf8"), "VmHWM") * 1024;
}

function readStatusKb(status: string, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status);
  if (!m) throw new Error(`no ${field} in /proc status`);
  return Number(m[1]);
}

export interface RssPeak {
  /** RSS when sampling started, bytes. */
  start: number;
  /** Highest RSS seen, bytes. */
  peak: number;
  /** peak - start, bytes. */
  growth: number;
  samples: number;
}

/**
 * Samples a pid's VmRSS every `intervalMs` on a worker thread, so that a
 * benchmark keeping this thread's event loop busy does not stretch the
 * interval. `stop()` returns the start, the peak and how many samples were taken.
 */
export class RssSampler {
  private readonly worker: Worker;
  private readonly ready: Promise<void>;
  private readonly stopFlag = new SharedArrayBuffer(4);

  private constructor(pid: number, intervalMs: number) {
    // Plain CommonJS so it needs no build step; Atomics.wait sleeps without an event loop.
    const code = `
      const { parentPort, workerData } = require("node:worker_threads");
      const { readFileSync } = require("node:fs");
      const { pid, intervalMs, stopFlag } = workerData;
      const flag = new Int32Array(stopFlag);
      const rss = () => {
        try {
          const m = /^VmRSS:\\s+(\\d+) kB/m.exec(readFileSync("/proc/" + pid + "/status", "utf8"));
          return m ? Number(m[1]) * 1024 : NaN;
        } catch { return NaN; }
      };
      const start = rss();
      let peak = start, samples = 1;
      parentPort.postMessage({ kind: "ready" });
      while (Atomics.wait(flag, 0, 0, intervalMs) === "timed-out") {
        const v = rss();
        if (!Number.isNaN(v)) { samples++; if (v > peak) peak = v; }
      }
      const last = rss();
      if (!Number.isNaN(last)) { samples++; if (last > peak) peak = last; }
      parentPort.postMessage({ kind: "done", start, peak, samples });
    `;
    this.worker = new Worker(code, { eval: true, workerData: { pid, intervalMs, stopFlag: this.stopFlag } });
    this.ready = new Promise((resolve, reject) => {
      this.worker.once("error", reject);
      this.worker.once("message", () => resolve());
    });
  }

  /** Starts sampling; resolves once the first (start) sample is taken. */
  static async start(pid: number, intervalMs = 50): Promise<RssSampler> {
    const s = new RssSampler(pid, intervalMs);
    await s.ready;
    return s;
  }

  async stop(): Promise<RssPeak> {
    const done = new Promise<{ start: number; peak: number; samples: number }>((resolve, reject) => {
      this.worker.once("error", reject);
      this.worker.once("message", resolve);
    });
    const flag = new Int32Array(this.stopFlag);
    Atomics.store(flag, 0, 1);
    Atomics.notify(flag, 0);
    const r = await done;
    await this.worker.terminate();
    return { start: r.start, peak: r.peak, growth: r.peak - r.start, samples: r.samples };
  }
}
