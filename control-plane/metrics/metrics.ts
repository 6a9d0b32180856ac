// The control plane's Prometheus metrics (GET /metrics): sandboxes by state,
// create/resume latency, proxied bytes and open proxy streams, lifecycle
// events, and a few process metrics. Dependency-free; see prometheus.ts.
import type { LifecycleBus } from "../manager/events.js";
import type { LifecycleEventType, SandboxState } from "../domain/sandbox.js";
import type { AdmissionStats } from "../manager/admission.js";
import { header, Histogram, LabeledCounter, sample } from "./prometheus.js";

/** Latency buckets in seconds, 5 ms … 5 min (a microVM under emulation boots in tens of seconds). */
export const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300] as const;

/**
 * Every state a live sandbox can be in: each is exposed, 0 where none are.
 * (Killed sandboxes are not counted here: see locale2b_sandbox_events_total.)
 */
export const SANDBOX_STATES: readonly SandboxState[] = ["creating", "running", "pausing", "paused", "resuming"];

export const EVENT_TYPES: readonly LifecycleEventType[] = ["created", "paused", "resumed", "killed", "timed_out"];

export class ControlPlaneMetrics {
  private readonly create = new Histogram(
    "locale2b_sandbox_create_seconds",
    "Time to create a sandbox until its envd answers, in seconds.",
    LATENCY_BUCKETS,
  );
  private readonly resume = new Histogram(
    "locale2b_sandbox_resume_seconds",
    "Time to resume a paused sandbox, in seconds.",
    LATENCY_BUCKETS,
  );
  private readonly proxied = new LabeledCounter(
    "locale2b_proxied_bytes_total",
    "Bytes the envd proxy carried: in = client to sandbox, out = sandbox to client.",
    "direction",
    ["in", "out"],
  );
  private readonly events = new LabeledCounter(
    "locale2b_sandbox_events_total",
    "Sandbox lifecycle events by type.",
    "type",
    EVENT_TYPES,
  );
  private readonly connections = new LabeledCounter(
    "locale2b_connections_total",
    "Connections accepted on the API port, by protocol: http/1.1 and h2c in clear text, https/1.1 and h2 over TLS (ALPN).",
    "protocol",
    ["http/1.1", "h2c", "https/1.1", "h2"],
  );
  private openStreams = 0;
  private readonly startedAt = Date.now();
  private readonly unsubscribe: (() => void) | undefined;

  constructor(bus?: LifecycleBus) {
    this.unsubscribe = bus?.subscribe({}, (e) => this.events.inc(e.type));
  }

  /** Stops counting bus events. */
  close(): void {
    this.unsubscribe?.();
  }

  observeCreate(seconds: number): void {
    this.create.observe(seconds);
  }

  observeResume(seconds: number): void {
    this.resume.observe(seconds);
  }

  addProxiedBytes(direction: "in" | "out", n: number): void {
    this.proxied.inc(direction, n);
  }

  connectionAccepted(protocol: string): void {
    this.connections.inc(protocol);
  }

  streamOpened(): void {
    this.openStreams++;
  }

  streamClosed(): void {
    this.openStreams = Math.max(0, this.openStreams - 1);
  }

  /** The exposition text; `states` counts sandboxes by state (missing states are 0). */
  render(
    states: Record<string, number>,
    hostMemory: { sandboxId: string; runtime: string; bytes: number }[] = [],
    admission?: AdmissionStats,
    warmReady?: number,
  ): string {
    let out = header("locale2b_sandboxes", "gauge", "Sandboxes by state.");
    const names = [...SANDBOX_STATES, ...Object.keys(states).filter((s) => !SANDBOX_STATES.includes(s as SandboxState))];
    for (const s of names) out += sample("locale2b_sandboxes", { state: s }, states[s] ?? 0);
    out += this.create.render();
    out += this.resume.render();
    out += this.proxied.render();
    out += header("locale2b_proxy_open_streams", "gauge", "Requests and streams the envd proxy has open.");
    out += sample("locale2b_proxy_open_streams", {}, this.openStreams);
    out += this.events.render();
    out += this.connections.render();
    if (admission) out += renderAdmission(admission);
    if (warmReady !== undefined) {
      out += header("locale2b_warm_pool_ready", "gauge", "Sandboxes started ahead of time and ready to hand out (--warm-pool).");
      out += sample("locale2b_warm_pool_ready", {}, warmReady);
    }
    if (hostMemory.length) {
      out += header("locale2b_sandbox_host_memory_bytes", "gauge", "Host memory a sandbox's VMM uses (resident: guest RAM it touched plus its own).");
      for (const m of hostMemory) out += sample("locale2b_sandbox_host_memory_bytes", { sandbox_id: m.sandboxId, runtime: m.runtime }, m.bytes);
    }
    out += this.processMetrics();
    return out;
  }

  private processMetrics(): string {
    const mem = process.memoryUsage();
    const cpu = process.cpuUsage();
    let out = header("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    out += sample("process_resident_memory_bytes", {}, mem.rss);
    out += header("nodejs_heap_used_bytes", "gauge", "V8 heap in use, in bytes.");
    out += sample("nodejs_heap_used_bytes", {}, mem.heapUsed);
    out += header("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
    out += sample("process_cpu_seconds_total", {}, (cpu.user + cpu.system) / 1e6);
    out += header("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.");
    out += sample("process_start_time_seconds", {}, Math.round(Date.now() / 1000 - process.uptime()));
    out += header("locale2b_uptime_seconds", "gauge", "Seconds since the control plane started.");
    out += sample("locale2b_uptime_seconds", {}, (Date.now() - this.startedAt) / 1000);
    return out;
  }
}

/** Sandbox-start admission: the limits (--max-concurrent-creates, --create-queue), what runs and waits, and refusals. */
function renderAdmission(a: AdmissionStats): string {
  let out = header("locale2b_create_concurrency_limit", "gauge", "Sandbox starts the server runs at once (--max-concurrent-creates).");
  out += sample("locale2b_create_concurrency_limit", {}, a.limits.concurrent);
  out += header("locale2b_create_queue_limit", "gauge", "Sandbox creates that may wait for a start slot (--create-queue); more are answered 429.");
  out += sample("locale2b_create_queue_limit", {}, a.limits.queue);
  out += header("locale2b_creates_in_progress", "gauge", "Sandbox starts in progress.");
  out += sample("locale2b_creates_in_progress", {}, a.running);
  out += header("locale2b_creates_queued", "gauge", "Sandbox creates waiting for a start slot.");
  out += sample("locale2b_creates_queued", {}, a.queued);
  out += header("locale2b_creates_rejected_total", "counter", "Sandbox creates refused with 429 because the create queue was full.");
  out += sample("locale2b_creates_rejected_total", {}, a.rejected);
  return out;
}
