// E2B's filesystem-only pause with the real `e2b` JS SDK on the process
// runtime: `pause({ keepMemory: false })` keeps the files and stops every
// process (nothing of the sandbox runs while paused), connect cold-boots it
// (same id, token, envs and metadata; fresh processes); the timeout's
// `keepMemory: false` auto-pause; `onResume: 'reboot'` for a sandbox paused
// in memory; traffic never auto-resumes a sandbox paused to disk; and it
// survives a control-plane restart. Needs root (sandbox mode).
import { existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { heldImage, imageHeld } from "../../control-plane/images/image-refs.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { rejection, setEnv, waitFor } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;

let cp: TestControlPlane;
let restoreEnv = () => {};
let created: string[] = [];
const token = (s: Sandbox) => (s as unknown as { envdAccessToken?: string }).envdAccessToken ?? "";

beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
});
afterEach(async () => {
  await Promise.all(created.map((id) => Sandbox.kill(id).catch(() => false)));
  created = [];
});
afterAll(async () => {
  restoreEnv();
  await cp?.close();
});

async function create(opts?: Parameters<typeof Sandbox.create>[1]): Promise<Sandbox> {
  const sbx = await Sandbox.create("base", { timeoutMs: 600_000, ...opts });
  created.push(sbx.sandboxId);
  return sbx;
}

const sandboxDir = (id: string) => join(cp.dataDir, "sandboxes", id);
const pausedFiles = (id: string) => join(cp.dataDir, "paused", id);

describe.skipIf(skip !== undefined)(`filesystem-only pause${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("pause({ keepMemory: false }) keeps files, stops everything; connect cold-boots the same sandbox", async () => {
    const sbx = await create({ envs: { KEEP: "me" }, metadata: { app: "fs-pause" } });
    await sbx.files.write("/home/user/kept.txt", "on disk");
    await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    expect(await sbx.pause({ keepMemory: false })).toBe(true);
    expect((await sbx.getInfo()).state).toBe("paused");
    // Nothing of it runs: no instance, no sandbox directory; its files wait under paused/.
    expect(cp.manager["instances"].get(sbx.sandboxId)).toBeUndefined();
    expect(existsSync(sandboxDir(sbx.sandboxId))).toBe(false);
    // The writable layer's image, and the template build it is a layer over (kept while these files are: images/image-refs.ts).
    expect(readdirSync(pausedFiles(sbx.sandboxId)).sort()).toEqual([".image", "disk.img"]);
    expect(imageHeld(heldImage(pausedFiles(sbx.sandboxId))!)).toBe(true);
    expect(await sbx.pause({ keepMemory: false })).toBe(false);
    expect((await rejection(Sandbox.createSnapshot(sbx.sandboxId))).message).toMatch(/paused to disk: resume it first/);

    const again = await Sandbox.connect(sbx.sandboxId);
    expect(again.sandboxId).toBe(sbx.sandboxId);
    expect(token(again)).toBe(token(sbx));
    expect(await again.files.read("/home/user/kept.txt")).toBe("on disk");
    expect((await again.commands.run("echo $KEEP; hostname; pgrep -x sleep || echo none")).stdout).toBe(`me\n${sbx.sandboxId}\nnone\n`);
    expect(await again.getInfo()).toMatchObject({ state: "running", metadata: { app: "fs-pause" } });
    expect(existsSync(pausedFiles(sbx.sandboxId))).toBe(false);
    // And once more, now in memory: the running process survives that one.
    await again.commands.run("sleep 601", { background: true, timeoutMs: 0 });
    await again.pause();
    const third = await Sandbox.connect(sbx.sandboxId);
    expect((await third.commands.run("pgrep -fx 'sleep 601' >/dev/null && echo alive")).stdout).toBe("alive\n");
  });

  it("onResume 'reboot' cold-boots a sandbox paused in memory; a kill of a paused-to-disk sandbox leaves nothing", async () => {
    const sbx = await create();
    await sbx.files.write("/home/user/r.txt", "reboot");
    await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    await sbx.pause();
    const rebooted = await Sandbox.connect(sbx.sandboxId, { onResume: "reboot" });
    expect(await rebooted.files.read("/home/user/r.txt")).toBe("reboot");
    expect((await rebooted.commands.run("pgrep -x sleep || echo none")).stdout).toBe("none\n");

    await rebooted.pause({ keepMemory: false });
    expect(await Sandbox.kill(sbx.sandboxId)).toBe(true);
    expect(existsSync(pausedFiles(sbx.sandboxId))).toBe(false);
    expect(existsSync(sandboxDir(sbx.sandboxId))).toBe(false);
  });

  it("the timeout's keepMemory: false auto-pause, resumed by connect; traffic does not auto-resume a sandbox paused to disk", async () => {
    const sbx = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: { action: "pause", keepMemory: false } } });
    await sbx.files.write("/home/user/auto.txt", "auto");
    // The API says paused from the start of the pause (pausing): the server's own state says when it is done.
    await waitFor(() => cp.manager.get(sbx.sandboxId).state === "paused", "the timeout's pause");
    expect((await Sandbox.getInfo(sbx.sandboxId)).state).toBe("paused");
    expect(readdirSync(pausedFiles(sbx.sandboxId)).sort()).toEqual([".image", "disk.img"]);
    const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
    expect(await back.files.read("/home/user/auto.txt")).toBe("auto");

    // keepMemory: false is the timeout's: an explicit pause() of such a sandbox keeps its memory (E2B's default).
    const explicit = await create({ lifecycle: { onTimeout: { action: "pause", keepMemory: false } } });
    await explicit.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    await explicit.pause();
    expect((await (await Sandbox.connect(explicit.sandboxId)).commands.run("pgrep -x sleep >/dev/null && echo alive")).stdout).toBe("alive\n");

    // A sandbox with autoResume, paused to disk explicitly: traffic leaves it paused.
    const auto = await create({ lifecycle: { onTimeout: "pause", autoResume: true } });
    await auto.pause({ keepMemory: false });
    const viaTraffic = await rejection(auto.commands.run("true"));
    expect(viaTraffic.message).toMatch(/paused|not running|502/i);
    expect((await Sandbox.getInfo(auto.sandboxId)).state).toBe("paused");
    expect((await (await Sandbox.connect(auto.sandboxId)).commands.run("echo up")).stdout).toBe("up\n");
  });

  it("a sandbox paused to disk survives a control-plane restart and resumes after it", async () => {
    const sbx = await create();
    await sbx.files.write("/home/user/restart.txt", "still here");
    await sbx.pause({ keepMemory: false });
    await cp.stopKeepingSandboxes();
    // Files no sandbox paused to disk owns (a pause cut short by a crash) go at start; this sandbox's stay.
    mkdirSync(join(cp.dataDir, "paused", "ighost"), { recursive: true });
    const again = await startTestControlPlane({ runtime, dataDir: cp.dataDir, apiKey: cp.apiKey });
    const dataDir = cp.dataDir;
    // The first server's close removed its temporary data dir; this one was given it, so it removes it itself.
    cp = { ...again, close: () => again.close().finally(() => rmSync(dataDir, { recursive: true, force: true })) };
    restoreEnv();
    restoreEnv = setEnv({ ...again.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    expect((await Sandbox.getInfo(sbx.sandboxId)).state).toBe("paused");
    expect(readdirSync(join(again.dataDir, "paused"))).toEqual([sbx.sandboxId]);
    const back = await Sandbox.connect(sbx.sandboxId);
    expect(await back.files.read("/home/user/restart.txt")).toBe("still here");
  });
});
