// Templates, their builds, tags and build logs survive a restart of the
// server; a build the restart cut short ends as an error that says so.
// Real control planes on one data dir (process runtime). Needs root.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;
const dataDir = mkdtempSync(join(tmpdir(), "locale2b-tplrestart-"));
const apiKey = `e2b_${"7".repeat(40)}`;
let cp: TestControlPlane | undefined;

afterAll(async () => {
  await cp?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${cp!.url}${path}`, { method, headers: { "x-api-key": apiKey, "content-type": "application/json" }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : {} };
}

async function status(t: string, b: string): Promise<{ status: string; reason?: { message: string }; logEntries: { message: string }[] }> {
  return (await api("GET", `/templates/${t}/builds/${b}/status`)).json as never;
}

describe.skipIf(skip !== undefined)(`templates across a restart${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 300_000 }, () => {
  it("a template, its tags and its build log are there after a restart, and sandboxes start from it; a build cut short ends as an error", async () => {
    const start = () => startTestControlPlane({ runtime: new ProcessRuntime(), dataDir, apiKey });
    cp = await start();
    const name = `restart-${process.pid}`;
    const req = (await api("POST", "/v3/templates", { name: `${name}:v1` })).json as { templateID: string; buildID: string };
    await api("POST", `/v2/templates/${req.templateID}/builds/${req.buildID}`, { fromTemplate: "base", steps: [{ type: "RUN", args: [`echo survived-${process.pid} > /home/user/mark`] }] });
    while ((await status(req.templateID, req.buildID)).status !== "ready") await new Promise((r) => setTimeout(r, 200));
    // A second build, stopped by the restart while it runs.
    const cut = (await api("POST", "/v3/templates", { name: `${name}-cut` })).json as { templateID: string; buildID: string };
    await api("POST", `/v2/templates/${cut.templateID}/builds/${cut.buildID}`, { fromTemplate: "base", steps: [{ type: "RUN", args: ["sleep 600"] }] });
    while ((await status(cut.templateID, cut.buildID)).status !== "building") await new Promise((r) => setTimeout(r, 100));
    await cp.stopKeepingSandboxes();

    cp = await start();
    const after = await status(req.templateID, req.buildID);
    expect(after.status).toBe("ready");
    expect(after.logEntries.map((e) => e.message)).toContain(`RUN echo survived-${process.pid} > /home/user/mark`);
    expect(((await api("GET", `/templates/${req.templateID}/tags`)).json as unknown as { tag: string }[]).map((t) => t.tag)).toEqual(["v1"]);
    const cutAfter = await status(cut.templateID, cut.buildID);
    expect(cutAfter.status).toBe("error");
    // Stopped with the server (a crash would leave it "building": the next start says "interrupted by a restart").
    expect(cutAfter.reason?.message).toMatch(/the server is stopping: build again|interrupted by a restart of the server/);
    const restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    try {
      const sbx = await Sandbox.create(`${name}:v1`, { timeoutMs: 300_000 });
      expect((await sbx.commands.run("cat /home/user/mark")).stdout).toBe(`survived-${process.pid}\n`);
      await sbx.kill();
    } finally {
      restore();
    }
  });
});
