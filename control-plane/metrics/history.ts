import { readFileSync, readlinkSync } from "node:fs";
import type { Logger } from "pino";
import { ActivityService } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import type { SandboxManager } from "../manager/sandbox-manager.js";
import type { ActivityHistory } from "../store/activity-history.js";
import type { EnvdRpc } from "../transport/envd-rpc.js";
import { header, sample } from "./prometheus.js";

/** One sample of one sandbox. Byte counters (disk and network I/O) are cumulative; null where this host cannot tell. */
export interface MetricSample {
  /** ms since epoch */
  time: number;
  cpuCount: number;
  /** 0..100 over the interval before the sample. */
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
  diskReadBytes: number | null;
  diskWriteBytes: number | null;
  /** null when the sandbox shares the host's network (its traffic cannot be told apart). */
  netRxBytes: number | null;
  netTxBytes: number | null;
}

function hostIdentity(): { bootId: string; netns: string } {
  let bootId = "";
  let netns = "";
  try {
    bootId = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    // not Linux
  }
  try {
    netns = readlinkSync("/proc/self/ns/net");
  } catch {
    // not Linux
  }
  return { bootId, netns };
}

/**
 * Metrics history: every `intervalMs` a sample of each running sandbox
 * (CPU, memory and disk from its runtime, cumulative network and storage
 * I/O from its envd) is written to the activity database and kept for
 * `retentionMs`. Served by E2B's GET /sandboxes/{id}/metrics for the range
 * asked, by the workspace API's metrics route, and as Prometheus series
 * (the latest sample of each sandbox). A sandbox sharing the host's kernel
 * (the process runtime) reports the storage I/O of its processes; one
 * sharing the host's network reports no network I/O (null), as it cannot be
 * told apart from the host's.
 */
export class MetricsHistory {
  private readonly latest = new Map<string, MetricSample>();
  private timer: NodeJS.Timeout | undefined;
  private pruneTimer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private unsubscribe: (() => void) | undefined;
  private readonly host = hostIdentity();

  constructor(
    private readonly o: {
      manager: SandboxManager;
      rpc: EnvdRpc;
      history: ActivityHistory;
      intervalMs: number;
      retentionMs: number;
      /** Prune samples older than retentionMs (default); false: someone else prunes the shared history. */
      prune?: boolean;
      log: Logger;
    },
  ) {}

  get intervalMs(): number {
    return this.o.intervalMs;
  }

  start(): void {
    this.timer = setInterval(() => {
      // A slow round (many sandboxes) is not overlapped by the next one.
      this.running ??= this.sampleAll().finally(() => (this.running = undefined));
    }, this.o.intervalMs);
    this.timer.unref();
    if (this.o.prune ?? true) {
      this.pruneTimer = setInterval(() => this.prune().catch((err: unknown) => this.o.log.warn({ err }, "pruning the metrics history failed")), Math.min(3_600_000, Math.max(60_000, this.o.retentionMs / 10)));
      this.pruneTimer.unref();
    }
    this.unsubscribe = this.o.manager.events.subscribe({}, (e) => {
      if (e.type === "killed") this.latest.delete(e.sandbox.id);
    });
  }

  /** Samples every running sandbox now (the timer does it every interval). */
  async sampleAll(): Promise<void> {
    const ids = this.o.manager.list({ states: ["running"] }).map((r) => r.id);
    // A few at a time: each is a cgroup read and one small RPC.
    for (let i = 0; i < ids.length; i += 16) {
      await Promise.all(ids.slice(i, i + 16).map((id) => this.sampleOne(id)));
    }
  }

  /** A sample of one running sandbox, recorded; undefined when it is not running. */
  async sampleOne(id: string): Promise<MetricSample | undefined> {
    const target = this.o.manager.runningEndpoint(id);
    if (!target) return undefined;
    try {
      const [{ stats }, counters] = await Promise.all([
        this.o.manager.stats(id),
        this.o.rpc
          .client(ActivityService, { endpoint: target.endpoint, token: target.sandbox.envdAccessToken })
          .getCounters({}, { timeoutMs: 5_000 })
          .catch(() => undefined),
      ]);
      const sameKernel = counters !== undefined && this.host.bootId !== "" && counters.bootId === this.host.bootId;
      const sharedNet = sameKernel && counters.netNamespace === this.host.netns;
      const s: MetricSample = {
        time: Date.now(),
        cpuCount: stats.cpuCount,
        cpuUsedPct: Math.round(stats.cpuUsedPct * 100) / 100,
        memUsed: Math.round(stats.memUsedBytes),
        memTotal: Math.round(stats.memTotalBytes),
        diskUsed: Math.round(stats.diskUsedBytes),
        diskTotal: Math.round(stats.diskTotalBytes),
        diskReadBytes: counters ? Number(sameKernel ? counters.processReadBytes : counters.blockReadBytes) : null,
        diskWriteBytes: counters ? Number(sameKernel ? counters.processWriteBytes : counters.blockWriteBytes) : null,
        netRxBytes: counters && !sharedNet ? Number(counters.netRxBytes) : null,
        netTxBytes: counters && !sharedNet ? Number(counters.netTxBytes) : null,
      };
      this.latest.set(id, s);
      this.o.history.addSample(id, s);
      return s;
    } catch (err) {
      this.o.log.debug({ sandboxId: id, err: (err as Error).message }, "metrics sample failed");
      return undefined;
    }
  }

  /** Samples of a sandbox from `fromMs` to `toMs` (inclusive), oldest first. */
  range(sandboxId: string, fromMs: number, toMs: number, limit = 10_000): Promise<MetricSample[]> {
    return this.o.history.samples(sandboxId, fromMs, toMs, limit);
  }

  /** The newest sample taken since this server started, if any. */
  latestOf(sandboxId: string): MetricSample | undefined {
    return this.latest.get(sandboxId);
  }

  prune(now = Date.now()): Promise<number> {
    return this.o.history.prune("samples", now - this.o.retentionMs);
  }

  /** The latest sample of each live sandbox, as Prometheus series. */
  renderPrometheus(): string {
    const rows = [...this.latest.entries()];
    const series: [string, "gauge" | "counter", string, (s: MetricSample) => number | null][] = [
      ["locale2b_sandbox_cpu_used_percent", "gauge", "CPU a sandbox used over the last sampling interval, in percent of its vCPUs.", (s) => s.cpuUsedPct],
      ["locale2b_sandbox_cpu_count", "gauge", "vCPUs of a sandbox.", (s) => s.cpuCount],
      ["locale2b_sandbox_memory_used_bytes", "gauge", "Memory a sandbox uses.", (s) => s.memUsed],
      ["locale2b_sandbox_memory_total_bytes", "gauge", "Memory a sandbox may use.", (s) => s.memTotal],
      ["locale2b_sandbox_disk_used_bytes", "gauge", "Disk space used where a sandbox's files are.", (s) => s.diskUsed],
      ["locale2b_sandbox_disk_total_bytes", "gauge", "Disk space where a sandbox's files are.", (s) => s.diskTotal],
      ["locale2b_sandbox_disk_read_bytes_total", "counter", "Bytes a sandbox read from storage.", (s) => s.diskReadBytes],
      ["locale2b_sandbox_disk_written_bytes_total", "counter", "Bytes a sandbox wrote to storage.", (s) => s.diskWriteBytes],
      ["locale2b_sandbox_network_receive_bytes_total", "counter", "Bytes a sandbox received (absent when it shares the host's network).", (s) => s.netRxBytes],
      ["locale2b_sandbox_network_transmit_bytes_total", "counter", "Bytes a sandbox sent (absent when it shares the host's network).", (s) => s.netTxBytes],
    ];
    let out = "";
    for (const [name, type, help, value] of series) {
      const present = rows.filter(([, s]) => value(s) !== null);
      if (present.length === 0) continue;
      out += header(name, type, help);
      for (const [id, s] of present) out += sample(name, { sandbox_id: id }, value(s)!);
    }
    out += header("locale2b_metrics_sample_interval_seconds", "gauge", "How often sandboxes are sampled for the metrics history.");
    out += sample("locale2b_metrics_sample_interval_seconds", {}, this.o.intervalMs / 1000);
    return out;
  }

  close(): void {
    this.unsubscribe?.();
    clearInterval(this.timer);
    clearInterval(this.pruneTimer);
  }
}
