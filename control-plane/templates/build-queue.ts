// Builds run a bounded number at once (each is a sandbox doing real work);
// the rest wait their turn in order. A build can be cancelled queued or
// running, and has a time limit. The queue moves each build's status on in
// the template service: waiting → building → ready | error.
import type { Logger } from "pino";
import type { RegistryAuth, TemplateBuildRecord } from "../domain/template.js";
import type { BuildLog } from "./build-log.js";
import { BuildFailure, type TemplateBuilder } from "./builder.js";
import type { BuildRunner, BuildStart } from "./template-service.js";

interface Job {
  build: TemplateBuildRecord;
  start: BuildStart;
  log: BuildLog;
  ac: AbortController;
}

export interface QueueSettings {
  /** Builds run at once. */
  concurrent: number;
  /** A build's time limit. */
  timeoutMs: number;
}

export class BuildQueue implements BuildRunner {
  private readonly waiting: Job[] = [];
  private readonly running = new Map<string, Job>();
  private closed = false;

  constructor(
    private readonly builder: TemplateBuilder,
    private readonly report: (buildId: string, change: { status: TemplateBuildRecord["status"]; reason?: { message: string; step?: string }; result?: TemplateBuildRecord["result"] }) => void,
    private readonly settings: QueueSettings,
    private readonly log: Logger,
  ) {}

  enqueue(build: TemplateBuildRecord, start: BuildStart, log: BuildLog): void {
    if (this.closed) throw new Error("the server is stopping");
    this.waiting.push({ build, start, log, ac: new AbortController() });
    if (this.running.size >= this.settings.concurrent) {
      log.add({ timestamp: Date.now(), level: "info", message: `waiting for a build slot (${this.running.size} running, ${this.waiting.length} queued)` });
    }
    this.pump();
  }

  cancel(buildId: string): boolean {
    const i = this.waiting.findIndex((j) => j.build.id === buildId);
    if (i >= 0) {
      const [job] = this.waiting.splice(i, 1);
      this.report(buildId, { status: "error", reason: { message: "the build was cancelled before it started" } });
      job!.ac.abort();
      return true;
    }
    const job = this.running.get(buildId);
    if (!job) return false;
    job.ac.abort(new BuildFailure("the build was cancelled", "cancelled"));
    return true;
  }

  busy(buildId: string): boolean {
    return this.running.has(buildId) || this.waiting.some((j) => j.build.id === buildId);
  }

  /** The server stops: waiting builds fail at once, running ones are stopped and awaited. */
  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.waiting.splice(0)) this.report(job.build.id, { status: "error", reason: { message: "the server stopped before the build started: build again" } });
    const running = [...this.running.values()];
    for (const job of running) job.ac.abort(new BuildFailure("the server is stopping: build again", "cancelled"));
    await Promise.all(running.map((j) => this.done.get(j.build.id)));
  }

  private readonly done = new Map<string, Promise<void>>();

  private pump(): void {
    while (!this.closed && this.running.size < this.settings.concurrent && this.waiting.length) {
      const job = this.waiting.shift()!;
      this.running.set(job.build.id, job);
      const p = this.runJob(job).finally(() => {
        this.running.delete(job.build.id);
        this.done.delete(job.build.id);
        this.pump();
      });
      this.done.set(job.build.id, p);
    }
  }

  private async runJob(job: Job): Promise<void> {
    const { build, start, log, ac } = job;
    const timer = setTimeout(() => ac.abort(new BuildFailure(`the build took longer than its limit of ${Math.round(this.settings.timeoutMs / 1000)} s`, "timeout")), this.settings.timeoutMs);
    timer.unref();
    this.report(build.id, { status: "building" });
    const t0 = Date.now();
    try {
      const result = await this.builder.run(build, start.spec, start.auth as RegistryAuth | undefined, log, ac.signal);
      if (ac.signal.aborted) throw ac.signal.reason;
      this.report(build.id, { status: "ready", result });
      this.log.info({ buildId: build.id, templateId: build.templateId, seconds: Math.round((Date.now() - t0) / 1000) }, "template built");
    } catch (err) {
      const reason = ac.signal.aborted && ac.signal.reason instanceof BuildFailure ? ac.signal.reason : err;
      const message = reason instanceof Error ? reason.message : String(reason);
      const step = reason instanceof BuildFailure && reason.step !== "cancelled" && reason.step !== "timeout" ? reason.step : undefined;
      this.report(build.id, { status: "error", reason: { message, ...(step ? { step } : {}) } });
    } finally {
      clearTimeout(timer);
    }
  }
}
