// Warm sandboxes of templates with a start command: after a first (cold)
// create of such a template, the server keeps one started, its start command
// run and its ready command passed, and the next create takes it; a create
// with env vars of its own does not (the start command ran without them).
// Real JS SDK, real control plane (process runtime). Needs root.
import { Sandbox, Template, waitForPort } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;

let cp: TestControlPlane;
let restoreEnv = () => {};
const sandboxes: Sandbox[] = [];

beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime, templateWarmPool: 1 });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
}, 120_000);

afterAll(async () => {
  await Promise.all(sandboxes.map((s) => s.kill().catch(() => false)));
  restoreEnv();
  await cp?.close();
});

async function create(template: string, opts?: Parameters<typeof Sandbox.create>[1]): Promise<Sandbox> {
  const s = await Sandbox.create(template, { timeoutMs: 300_000, ...opts });
  sandboxes.push(s);
  return s;
}

describe.skipIf(skip !== undefined)(`warm sandboxes of templates${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 300_000 }, () => {
  it("a template with a start command gets a warm sandbox after its first create; the next create takes it, already serving", async () => {
    const name = `warm-${process.pid}`;
    await Template.build(
      Template()
        .fromTemplate("base")
        .runCmd("mkdir -p /home/user/w && echo warm-served > /home/user/w/index.html && date +%s%N > /home/user/w/started")
        .setStartCmd("cd /home/user/w && date +%s%N > started-at && python3 -m http.server 8088", waitForPort(8088)),
      name,
    );
    expect(cp.manager.warmCount).toBe(0);
    const cold = await create(name);
    expect((await cold.commands.run("curl -s http://127.0.0.1:8088/")).stdout).toBe("warm-served\n");
    // The pool of this template fills in the background.
    await expect.poll(() => cp.manager.warmCount, { timeout: 60_000, interval: 200 }).toBe(1);
    const warm = await create(name);
    expect(cp.manager.warmCount).toBe(0);
    // Its start command ran before this create, and serves at once.
    const res = await fetch(`${cp.url}/`, { headers: { "E2b-Sandbox-Id": warm.sandboxId, "E2b-Sandbox-Port": "8088" } });
    expect(await res.text()).toBe("warm-served\n");
    // Its own id, token and settings, as any create's.
    expect(warm.sandboxId).not.toBe(cold.sandboxId);
    expect((await warm.commands.run("hostname")).stdout.trim()).toBe(warm.sandboxId);

    // Refilled; a create with env vars of its own starts fresh (the warm one's start command ran without them).
    await expect.poll(() => cp.manager.warmCount, { timeout: 60_000, interval: 200 }).toBe(1);
    const withEnvs = await create(name, { envs: { MINE: "yes" } });
    expect(cp.manager.warmCount).toBe(1);
    expect((await withEnvs.commands.run("echo $MINE; curl -s http://127.0.0.1:8088/")).stdout).toBe("yes\nwarm-served\n");

    // Deleting the template (once no sandbox uses it) takes its warm sandbox too.
    await Promise.all(sandboxes.splice(0).map((s) => s.kill()));
    const del = await fetch(`${cp.url}/templates/${name}`, { method: "DELETE", headers: { "x-api-key": cp.apiKey } });
    expect(del.status).toBe(204);
    expect(cp.manager.warmCount).toBe(0);
  });
});
