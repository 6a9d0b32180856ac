// Prometheus /metrics: the exposition itself (unit) and GET /metrics of a
// real control plane, where creating a sandbox moves the series.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LifecycleBus } from "../../control-plane/manager/events.js";
import type { SandboxRecord } from "../../control-plane/domain/sandbox.js";
import { ControlPlaneMetrics } from "../../control-plane/metrics/metrics.js";
import { processClient } from "../../control-plane/cli/client.js";
import { apiClient } from "../helpers/connect-api.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";

/** Parses the text format: `name{labels} value` samples, checking every line's shape. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line) continue;
    if (line.startsWith("#")) {
      expect(line).toMatch(/^# (HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+|TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram))$/);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    expect(m, `bad sample line: ${line}`).not.toBeNull();
    out.set(m![1]!, Number(m![2]));
  }
  return out;
}

describe("ControlPlaneMetrics (unit)", () => {
  it("renders every series, counts bus events, histograms are cumulative", () => {
    const bus = new LifecycleBus();
    const m = new ControlPlaneMetrics(bus);
    m.observeCreate(0.003);
    m.observeCreate(0.7);
    m.observeCreate(100);
    m.observeResume(0.02);
    m.addProxiedBytes("in", 10);
    m.addProxiedBytes("out", 5);
    m.addProxiedBytes("out", 7);
    m.streamOpened();
    m.streamOpened();
    m.streamClosed();
    const sandbox = { id: "s", metadata: {} } as unknown as SandboxRecord;
    bus.emit({ type: "created", sandbox, time: 1 });
    bus.emit({ type: "timed_out", sandbox, time: 2 });
    bus.emit({ type: "killed", sandbox, time: 3 });
    const s = samples(m.render({ running: 2, paused: 1 }));
    expect(s.get('locale2b_sandboxes{state="running"}')).toBe(2);
    expect(s.get('locale2b_sandboxes{state="paused"}')).toBe(1);
    for (const state of ["creating", "pausing", "resuming"]) expect(s.get(`locale2b_sandboxes{state="${state}"}`)).toBe(0);
    expect(s.get('locale2b_sandbox_create_seconds_bucket{le="0.005"}')).toBe(1);
    expect(s.get('locale2b_sandbox_create_seconds_bucket{le="1"}')).toBe(2);
    expect(s.get('locale2b_sandbox_create_seconds_bucket{le="30"}')).toBe(2);
    expect(s.get('locale2b_sandbox_create_seconds_bucket{le="+Inf"}')).toBe(3);
    expect(s.get("locale2b_sandbox_create_seconds_count")).toBe(3);
    expect(s.get("locale2b_sandbox_create_seconds_sum")).toBeCloseTo(100.703);
    expect(s.get("locale2b_sandbox_resume_seconds_count")).toBe(1);
    expect(s.get('locale2b_sandbox_resume_seconds_bucket{le="0.025"}')).toBe(1);
    expect(s.get('locale2b_proxied_bytes_total{direction="in"}')).toBe(10);
    expect(s.get('locale2b_proxied_bytes_total{direction="out"}')).toBe(12);
    expect(s.get("locale2b_proxy_open_streams")).toBe(1);
    expect(s.get('locale2b_sandbox_events_total{type="created"}')).toBe(1);
    expect(s.get('locale2b_sandbox_events_total{type="timed_out"}')).toBe(1);
    expect(s.get('locale2b_sandbox_events_total{type="killed"}')).toBe(1);
    expect(s.get('locale2b_sandbox_events_total{type="paused"}')).toBe(0);
    expect(s.get("process_resident_memory_bytes")).toBeGreaterThan(0);
    expect(s.get("locale2b_uptime_seconds")).toBeGreaterThanOrEqual(0);
    m.close();
  });

  it("never lets the open-streams gauge go negative, nor counters go down", () => {
    const m = new ControlPlaneMetrics();
    m.streamClosed();
    m.addProxiedBytes("in", -5);
    m.addProxiedBytes("in", Number.NaN);
    const s = samples(m.render({}));
    expect(s.get("locale2b_proxy_open_streams")).toBe(0);
    expect(s.get('locale2b_proxied_bytes_total{direction="in"}')).toBe(0);
  });
});

describe("GET /metrics", () => {
  let cp: TestControlPlane;
  beforeAll(async () => {
    cp = await startTestControlPlane();
  });
  afterAll(async () => {
    await cp?.close();
  });

  async function scrape(): Promise<Map<string, number>> {
    const res = await fetch(`${cp.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/plain");
    return samples(await res.text());
  }

  it("exposes the series, with no API key needed", async () => {
    const s = await scrape();
    for (const name of [
      'locale2b_sandboxes{state="running"}',
      'locale2b_sandboxes{state="paused"}',
      "locale2b_sandbox_create_seconds_count",
      'locale2b_sandbox_create_seconds_bucket{le="+Inf"}',
      "locale2b_sandbox_resume_seconds_count",
      'locale2b_proxied_bytes_total{direction="in"}',
      'locale2b_proxied_bytes_total{direction="out"}',
      "locale2b_proxy_open_streams",
      'locale2b_sandbox_events_total{type="created"}',
      "process_resident_memory_bytes",
    ]) {
      expect(s.has(name), name).toBe(true);
    }
  });

  it("a create increments the create histogram, the running gauge and the created events", async () => {
    const before = await scrape();
    const api = apiClient(cp.url, "connect-json", { "x-api-key": cp.apiKey });
    const { sandbox } = await api.createSandbox({ templateId: "base" });
    const after = await scrape();
    const delta = (k: string) => after.get(k)! - before.get(k)!;
    expect(delta("locale2b_sandbox_create_seconds_count")).toBe(1);
    expect(delta('locale2b_sandbox_create_seconds_bucket{le="+Inf"}')).toBe(1);
    expect(delta("locale2b_sandbox_create_seconds_sum")).toBeGreaterThan(0);
    expect(delta('locale2b_sandboxes{state="running"}')).toBe(1);
    expect(delta('locale2b_sandbox_events_total{type="created"}')).toBe(1);

    // Traffic through the envd proxy: a command's output comes back.
    const proc = processClient(cp.url, sandbox!.sandboxId, sandbox!.envdAccessToken);
    let output = "";
    for await (const res of proc.start({ process: { cmd: "echo", args: ["proxied"] }, stdin: false })) {
      const ev = res.event?.event;
      if (ev?.case === "data" && ev.value.output.case === "stdout") output += Buffer.from(ev.value.output.value).toString();
    }
    expect(output).toBe("proxied\n");
    const proxied = await scrape();
    expect(proxied.get('locale2b_proxied_bytes_total{direction="in"}')!).toBeGreaterThan(after.get('locale2b_proxied_bytes_total{direction="in"}')!);
    expect(proxied.get('locale2b_proxied_bytes_total{direction="out"}')!).toBeGreaterThan(after.get('locale2b_proxied_bytes_total{direction="out"}')!);
    await expect.poll(async () => (await scrape()).get("locale2b_proxy_open_streams"), { timeout: 20_000 }).toBe(0);

    await api.pauseSandbox({ sandboxId: sandbox!.sandboxId });
    await api.resumeSandbox({ sandboxId: sandbox!.sandboxId });
    await api.killSandbox({ sandboxId: sandbox!.sandboxId });
    const end = await scrape();
    expect(end.get("locale2b_sandbox_resume_seconds_count")! - before.get("locale2b_sandbox_resume_seconds_count")!).toBe(1);
    expect(end.get('locale2b_sandbox_events_total{type="killed"}')! - before.get('locale2b_sandbox_events_total{type="killed"}')!).toBe(1);
    expect(end.get('locale2b_sandboxes{state="running"}')).toBe(before.get('locale2b_sandboxes{state="running"}'));
  });
});
