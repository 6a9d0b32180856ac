// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The manager's lifecycle edge cases, fast: a stand-in runtime (real envd per
// sandbox, scripted pause/resume/death; test/helpers/stand-in-runtime.ts)
// behind a real control plane, driven through the REST API and the E2B SDK.
// What a runtime's failure must never do: lose a sandbox, leave it half
// paused, or hang the API.
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { StandInRuntime } from "../helpers/stand-in-runtime.js";
import { waitFor } from "../helpers/wait.js";

const servers: TestControlPlane[] = [];
afterAll(async () => {
  for (const s of servers.reverse()) await s.close().catch(() => undefined);
});

async function server(runtime: StandInRuntime, dataDir?: string): Promise<TestControlPlane> {
  const cp = await startTestControlPlane({ runtime, ...(dataDir ? { dataDir } : {}) });
  servers.push(cp);
  return cp;
}

function api(cp: TestControlPlane) {
  return async (method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
    const res = await fetch(`${cp.url}${path}`, {
      method,
      headers: { "X-API-Key": cp.apiKey, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
  };
}

async function create(cp: TestControlPlane): Promise<string> {
  const r = await api(cp)("POST", "/v2/sandboxes", { templateID: "base", timeout: 300 });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json.sandboxID as string;
}

const state = async (cp: TestControlPlane, id: string) => (await api(cp)("GET", `/sandboxes/${id}`)).json.state;

describe("manager lifecycle against a stand-in runtime", () => {
  it("a pause that fails leaves the sandbox running and usable, and says why", async () => {
    const rt = new StandInRuntime("quiet");
    const cp = await server(rt);
    const id = await create(cp);
    rt.faults.pause = new Error("the VMM refused to stop");
    const r = await api(cp)("POST", `/sandboxes/${id}/pause`);
    expect(r.status).toBe(500);
    expect(String(r.json.message)).toMatch(/failed to pause sandbox .*the VMM refused to stop/);
    expect(await state(cp, id)).toBe("running");
    // Traffic held for the pause was let through: the sandbox answers at once.
    const sbx = await Sandbox.connect(id, { ...sdkOpts(cp) });
    expect((await sbx.commands.run("echo still-here")).stdout).toBe("still-here\n");
    // And a later pause works.
    expect((await api(cp)("POST", `/sandboxes/${id}/pause`)).status).toBe(204);
    expect(await state(cp, id)).toBe("paused");
  });

  it("a resume that fails leaves the sandbox paused; the next resume works", async () => {
    const rt = new StandInRuntime("drop");
    const cp = await server(rt);
    const id = await create(cp);
    expect((await api(cp)("POST", `/sandboxes/${id}/pause`)).status).toBe(204);
    rt.faults.resume = new Error("snapshot load failed");
    const r = await api(cp)("POST", `/sandboxes/${id}/connect`, { timeout: 60 });
    expect(r.status).toBe(500);
    expect(String(r.json.message)).toMatch(/failed to resume sandbox .*snapshot load failed/);
    expect(await state(cp, id)).toBe("paused");
    expect((await api(cp)("POST", `/sandboxes/${id}/connect`, { timeout: 60 })).status).toBe(201);
    expect(await state(cp, id)).toBe("running");
    const sbx = await Sandbox.connect(id, { ...sdkOpts(cp) });
    expect((await sbx.commands.run("echo back")).stdout).toBe("back\n");
  });

  it("a guest slow to answer after its resume gets its readiness budget, not a failed resume", async () => {
    const rt = new StandInRuntime("drop");
    const cp = await server(rt);
    const id = await create(cp);
    expect((await api(cp)("POST", `/sandboxes/${id}/pause`)).status).toBe(204);
    rt.faults.unreachableAfterResumeMs = 1_500; // the first /init finds no envd; it is back within its budget
    expect((await api(cp)("POST", `/sandboxes/${id}/connect`, { timeout: 60 })).status).toBe(201);
    expect(await state(cp, id)).toBe("running");
    const sbx = await Sandbox.connect(id, { ...sdkOpts(cp) });
    expect((await sbx.commands.run("echo back")).stdout).toBe("back\n");
  });

  it("a restart finishes a pause it cut short, kills a create it cut short, and buries a sandbox that died meanwhile", async () => {
    const rt = new StandInRuntime();
    const first = await server(rt);
    const [pausing, dying] = [await create(first), await create(first)];
    let release!: () => void;
    rt.faults.pauseGate = new Promise<void>((r) => (release = r));
    const cutShort = api(first)("POST", `/sandboxes/${pausing}/pause`).catch(() => undefined);
    await waitFor(() => rt.instances.get(pausing)!.calls.includes("pause"), "the pause to reach the runtime");
    rt.faults.pauseGate = undefined;
    await first.stopKeepingSandboxes();
    await rt.instances.get(dying)!.die("killed from outside");

    const second = await server(rt, first.dataDir);
    expect(await state(second, pausing)).toBe("paused");
    expect(rt.instances.get(pausing)!.calls.filter((c) => c === "pause")).toHaveLength(2); // the adoption paused it again
    expect((await api(second)("GET", `/sandboxes/${dying}`)).status).toBe(404);
    release();
    await cutShort;
    // The adopted sandbox resumes and runs commands.
    expect((await api(second)("POST", `/sandboxes/${pausing}/connect`, { timeout: 60 })).status).toBe(201);
    const sbx = await Sandbox.connect(pausing, { ...sdkOpts(second) });
    expect((await sbx.commands.run("echo adopted")).stdout).toBe("adopted\n");
  });

  it("a snapshot its runtime can no longer start from is a 409 that says what to do, and leaves nothing behind", async () => {
    const rt = new StandInRuntime();
    const cp = await server(rt);
    const id = await create(cp);
    const snap = await api(cp)("POST", `/sandboxes/${id}/snapshots`, {});
    expect(snap.status, JSON.stringify(snap.json)).toBe(201);
    rt.faults.snapshotUnusable = "the template image this snapshot was taken on is gone: take the snapshot again";
    const before = rt.instances.size;
    const r = await api(cp)("POST", "/v2/sandboxes", { templateID: snap.json.snapshotID, timeout: 60 });
    expect(r.status).toBe(409);
    expect(String(r.json.message)).toMatch(/take the snapshot again/);
    expect(rt.instances.size).toBe(before);
    rt.faults.snapshotUnusable = undefined;
    expect((await api(cp)("POST", "/v2/sandboxes", { templateID: snap.json.snapshotID, timeout: 60 })).status).toBe(201);
  });
});

function sdkOpts(cp: TestControlPlane) {
  return { apiUrl: cp.url, sandboxUrl: cp.url, apiKey: cp.apiKey, debug: false } as const;
}

