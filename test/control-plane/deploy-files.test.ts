// deploy/: the Prometheus alert rules and the Grafana dashboard use only
// metrics a live server exports (a real `serve` with a running sandbox,
// created with the `e2b` SDK, sampled once), their PromQL parses (promtool,
// where installed), and the systemd unit keeps sandboxes alive across
// restarts (KillMode=process, no directive that gives the service a mount
// namespace of its own).
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Sandbox } from "e2b";
import { parse } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findExecutable } from "../../control-plane/host/executables.js";
import { serve, type Served } from "../helpers/cli.js";

const repo = fileURLToPath(new URL("../..", import.meta.url));
const read = (rel: string) => readFileSync(join(repo, rel), "utf8");
const tmp = mkdtempSync(join(tmpdir(), "locale2b-deploy-"));
const apiKey = `e2b_${randomBytes(20).toString("hex")}`;

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: { severity: string };
  annotations: { summary: string; description: string };
}
const rules = (parse(read("deploy/prometheus/alerts.yml")) as { groups: { name: string; rules: Rule[] }[] }).groups.flatMap((g) => g.rules);
const dashboard = JSON.parse(read("deploy/grafana/locale2b.json")) as {
  uid: string;
  templating: { list: { name: string; definition?: string }[] };
  panels: { type: string; title: string; targets?: { expr: string }[] }[];
};
const dashboardExprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));

/** The metric names a PromQL expression reads (ours, and the process metrics the server exports). */
function metricNames(expr: string): string[] {
  return [...expr.matchAll(/\b((?:locale2b|process|nodejs)_[a-z0-9_]+)\b/g)].map((m) => m[1]!);
}

let server: Served;
let exported: Set<string>;

beforeAll(async () => {
  server = await serve(join(tmp, "data"), ["--warm-pool", "0", "--metrics-interval-s", "1"], { LOCALE2B_API_KEY: apiKey, LOCALE2B_NO_IMAGE_BUILD: "1" });
  const sbx = await Sandbox.create("base", { apiKey, apiUrl: server.url, sandboxUrl: server.url });
  await sbx.commands.run("echo busy");
  // The per-sandbox gauges appear once the sampler has seen the sandbox.
  let text = "";
  for (let i = 0; i < 100 && !text.includes("locale2b_sandbox_cpu_used_percent{"); i++) {
    text = await (await fetch(`${server.url}/metrics`)).text();
    if (!text.includes("locale2b_sandbox_cpu_used_percent{")) await new Promise((r) => setTimeout(r, 200));
  }
  exported = new Set([...text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )/gm)].map((m) => m[1]!));
  await sbx.kill();
});
afterAll(async () => {
  await server?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

describe("deploy/ on the metrics a live server exports", () => {
  it("a live server exports the per-sandbox metrics too (the test saw a sampled sandbox)", () => {
    expect(exported.has("locale2b_sandbox_cpu_used_percent")).toBe(true);
    expect(exported.has("locale2b_sandboxes")).toBe(true);
  });

  it("every metric an alert rule reads is in /metrics", () => {
    expect(rules.length).toBeGreaterThan(5);
    const missing = rules.flatMap((r) => metricNames(r.expr).filter((n) => !exported.has(n)).map((n) => `${r.alert}: ${n}`));
    expect(missing).toEqual([]);
    for (const r of rules) expect(metricNames(r.expr).length, r.alert).toBeGreaterThan(0);
  });

  it("every metric a dashboard panel reads is in /metrics", () => {
    expect(dashboardExprs.length).toBeGreaterThan(20);
    const missing = dashboardExprs.flatMap((e) => metricNames(e).filter((n) => !exported.has(n)).map((n) => `${n} in ${e}`));
    expect(missing).toEqual([]);
    for (const v of dashboard.templating.list) for (const n of metricNames(v.definition ?? "")) expect(exported.has(n), n).toBe(true);
  });
});

describe("deploy/ files are well formed", () => {
  it("alert rules: each has a severity, a summary, a description and one name", () => {
    const names = new Set<string>();
    for (const r of rules) {
      expect(r.alert).toMatch(/^Locale2b[A-Z][A-Za-z]+$/);
      expect(names.has(r.alert), r.alert).toBe(false);
      names.add(r.alert);
      expect(["critical", "warning", "info"]).toContain(r.labels.severity);
      expect(r.annotations.summary.length).toBeGreaterThan(10);
      expect(r.annotations.description.length).toBeGreaterThan(10);
    }
  });

  const promtool = findExecutable("promtool");
  it.skipIf(!promtool)(`promtool checks the alert rules and every dashboard query${promtool ? "" : " (skipped: no promtool; Debian's prometheus package has it)"}`, () => {
    const out = execFileSync(promtool!, ["check", "rules", join(repo, "deploy/prometheus/alerts.yml")], { encoding: "utf8" });
    expect(out).toContain(`SUCCESS: ${rules.length} rules found`);
    // The dashboard's queries, as recording rules ($instance as Grafana fills it in for "All").
    const recording = { groups: [{ name: "dashboard", rules: dashboardExprs.map((e, i) => ({ record: `dashboard:q${i}`, expr: e.replaceAll("$instance", ".*") })) }] };
    const file = join(tmp, "dashboard-rules.yml");
    writeFileSync(file, JSON.stringify(recording));
    expect(execFileSync(promtool!, ["check", "rules", file], { encoding: "utf8" })).toContain(`SUCCESS: ${dashboardExprs.length} rules found`);
  });

  it("the dashboard imports: a uid, a Prometheus datasource variable, panels with queries", () => {
    expect(dashboard.uid).toBe("locale2b");
    expect(dashboard.templating.list.map((v) => v.name)).toEqual(["datasource", "instance"]);
    for (const p of dashboard.panels.filter((p) => p.type !== "row")) expect(p.targets?.length, p.title).toBeGreaterThan(0);
  });

  it("the systemd unit keeps sandboxes across restarts and shares the host's mount namespace", () => {
    const unit = read("deploy/locale2b.service");
    const directives = unit.split("\n").filter((l) => /^[A-Z][A-Za-z]+=/.test(l));
    const get = (k: string) => directives.filter((l) => l.startsWith(`${k}=`)).map((l) => l.slice(k.length + 1));
    expect(get("KillMode")).toEqual(["process"]);
    expect(get("User")).toEqual(["root"]);
    expect(get("ExecStart")[0]).toMatch(/dist\/control-plane\/cli\/main\.js serve/);
    for (const k of ["ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables", "ProtectControlGroups", "NoNewPrivileges", "RestrictNamespaces", "RestrictSUIDSGID", "MemoryDenyWriteExecute", "CapabilityBoundingSet", "ReadOnlyPaths", "DevicePolicy"]) {
      expect(get(k), k).toEqual([]);
    }
    const analyze = findExecutable("systemd-analyze");
    if (analyze) execFileSync(analyze, ["verify", join(repo, "deploy/locale2b.service")], { encoding: "utf8" });
  });
});
