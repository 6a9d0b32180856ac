// Warm sandboxes: started ahead of time (envd up), handed out by a create of
// the default shape with that create's own settings (envs, metadata, tokens),
// refilled in the background, never listed, killed when the server stops, and
// cleaned up by the next start when a crash left them behind.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pino } from "pino";
import { cmdline } from "../../control-plane/runtimes/process/procfs.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { serve } from "../helpers/cli.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv, waitFor } from "../helpers/sdk.js";

/** Host pids whose command line names this sandbox dir (the sandbox's unshare/init/envd). */
function pidsOf(dir: string): number[] {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .map(Number)
    .filter((pid) => cmdline(pid).some((a) => a.includes(dir)));
}

/** The warm sandbox dirs: in the sandboxes folder but not in the store. */
function warmIds(cp: TestControlPlane): string[] {
  const dir = join(cp.dataDir, "sandboxes");
  return existsSync(dir) ? readdirSync(dir).filter((id) => existsSync(join(dir, id, "warm.json"))) : [];
}

describe("warm pool (process runtime)", () => {
  let cp: TestControlPlane;
  let restoreEnv = () => {};
  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 1 });
    restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    await waitFor(() => cp.manager.warmCount === 1, "the first warm sandbox");
  });
  afterAll(async () => {
    restoreEnv();
    await cp?.close();
  });

  it("a default create takes the warm sandbox, with its own envs, metadata and token; the pool refills", async () => {
    const [warmId] = warmIds(cp);
    expect(warmId).toBeDefined();
    expect(cp.manager.list().map((s) => s.id)).not.toContain(warmId); // not anyone's yet: not listed
    // Operators see the pool: the gauge on /metrics.
    const metrics = await (await fetch(`${cp.url}/metrics`, { headers: { "x-api-key": cp.apiKey } })).text();
    expect(metrics).toMatch(/^locale2b_warm_pool_ready 1$/m);
    const sbx = await Sandbox.create("base", { envs: { FROM_CREATE: "yes" }, metadata: { who: "warm-test" } });
    expect(sbx.sandboxId).toBe(warmId);
    const r = await sbx.commands.run('echo "$FROM_CREATE $(hostname) $(whoami)"');
    expect(r.stdout).toBe(`yes ${warmId} user\n`);
    // /workspace was made while the sandbox was warm, not on the create's path.
    expect((await sbx.commands.run("stat -c %U /workspace")).stdout).toBe("user\n");
    expect((await sbx.getInfo()).metadata).toEqual({ who: "warm-test" });
    expect(existsSync(join(cp.dataDir, "sandboxes", warmId!, "warm.json"))).toBe(false);
    await waitFor(() => cp.manager.warmCount === 1 && warmIds(cp).length === 1 && warmIds(cp)[0] !== warmId, "a new warm sandbox");
    await sbx.kill();
  });

  it("a create of another shape starts its own sandbox and leaves the warm one", async () => {
    const [warmId] = warmIds(cp);
    const sbx = await Sandbox.create("base", { allowInternetAccess: false });
    expect(sbx.sandboxId).not.toBe(warmId);
    expect(warmIds(cp)).toEqual([warmId]);
    await sbx.kill();
  });

  it("the server's close kills the warm sandboxes and removes their dirs", async () => {
    const other = await startTestControlPlane({ warmPool: 1 });
    await waitFor(() => other.manager.warmCount === 1, "a warm sandbox");
    const [id] = warmIds(other);
    const dir = join(other.dataDir, "sandboxes", id!);
    expect(pidsOf(dir).length).toBeGreaterThan(0);
    await other.manager.close();
    expect(existsSync(dir)).toBe(false);
    await waitFor(() => pidsOf(dir).length === 0, "the warm sandbox's processes to end");
    await other.close();
  });
});

describe("warm pool and capacity", () => {
  it("a create over the sandbox limit is refused without using up or leaking a warm sandbox", async () => {
    const cp = await startTestControlPlane({ warmPool: 1, limits: { maxSandboxes: 1 } });
    const restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    try {
      await waitFor(() => cp.manager.warmCount === 1, "a warm sandbox");
      const first = await Sandbox.create("base");
      await waitFor(() => cp.manager.warmCount === 1, "the refill");
      const err = await Sandbox.create("base").then(
        () => undefined,
        (e: Error) => e,
      );
      expect(err?.message).toMatch(/sandbox limit reached/);
      // The refused create's warm sandbox was discarded and replaced: still one, and no stray dirs.
      await waitFor(() => cp.manager.warmCount === 1 && warmIds(cp).length === 1, "the pool back at one");
      expect(cp.manager.list().map((s) => s.id)).toEqual([first.sandboxId]);
      await first.kill();
    } finally {
      restore();
      await cp.close();
    }
  });
});

describe("warm sandboxes a crashed server left behind", () => {
  it("one whose start the server died in the middle of (no record of its processes yet) is killed too", { timeout: 120_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-warm-"));
    const id = `iwarm${Date.now().toString(36)}`;
    const dir = join(dataDir, "sandboxes", id);
    mkdirSync(dir, { recursive: true });
    // What the pool writes before it starts one, then the start itself: the server "dies" before the marker gets the instance's record.
    writeFileSync(join(dir, "warm.json"), JSON.stringify({ runtime: "process" }));
    const rt = new ProcessRuntime();
    const inst = await rt.create({ sandboxId: id, templateId: "base", cpuCount: 1, memoryMB: 256, diskSizeMB: 512, dir, allowInternetAccess: false, background: true, log: pino({ level: "silent" }) });
    inst.detach?.();
    expect(pidsOf(dir).length).toBeGreaterThan(0);
    const next = await startTestControlPlane({ dataDir });
    try {
      expect(existsSync(dir)).toBe(false);
      await waitFor(() => pidsOf(dir).length === 0, "the half-started sandbox's processes to end");
    } finally {
      await next.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("are killed and removed by the next start", { timeout: 120_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-warm-"));
    const served = await serve(dataDir, ["--warm-pool", "1"]);
    const sandboxes = join(dataDir, "sandboxes");
    // Started: its marker has the instance's record (the pool writes a bare one before the start).
    const started = (id: string) => {
      try {
        return "persisted" in (JSON.parse(readFileSync(join(sandboxes, id, "warm.json"), "utf8")) as object);
      } catch {
        return false;
      }
    };
    const warm = () => (existsSync(sandboxes) ? readdirSync(sandboxes).filter(started) : []);
    await waitFor(() => warm().length === 1, "the server's warm sandbox");
    const dir = join(sandboxes, warm()[0]!);
    served.child.kill("SIGKILL");
    await new Promise((r) => served.child.once("exit", r));
    expect(pidsOf(dir).length).toBeGreaterThan(0); // sandboxes outlive the server
    const next = await startTestControlPlane({ dataDir });
    try {
      expect(existsSync(dir)).toBe(false);
      await waitFor(() => pidsOf(dir).length === 0, "the leftover's processes to end");
    } finally {
      await next.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
