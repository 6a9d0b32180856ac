// Warm start on gvisor: the first cold create of a template and shape builds,
// in the background, a checkpoint of a booted envd (<data dir>/gvisor-warm/);
// later creates of that shape are runsc restores of it. Each restored sandbox
// is its own: id, hostname, access token, env vars, network address, files.
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, Template, waitForPort } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { PersistedGvisorInstance } from "../../control-plane/runtimes/gvisor/instance.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { setEnv, waitFor } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";
const token = (s: Sandbox) => (s as unknown as { envdAccessToken?: string }).envdAccessToken ?? "";

describe.skipIf(missing !== undefined)(`gvisor: warm start from a checkpoint${why}`, { timeout: 300_000 }, () => {
  let cp: TestControlPlane | undefined;
  let restore = () => {};
  beforeAll(async () => {
    cp = await startTestControlPlane({ runtime: gvisorRuntime(), imagesDir: testImagesDir(), warmPool: 0 });
    restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  }, 300_000);
  afterAll(async () => {
    restore();
    await cp?.close();
  });
  const persisted = (id: string) => cp!.manager.get(id).runtimeData as unknown as PersistedGvisorInstance;

  it("the first create boots and builds the image; the next ones are restored, each its own sandbox", async () => {
    const first = await Sandbox.create("base", { timeoutMs: 300_000 });
    expect(persisted(first.sandboxId).restored).toBeUndefined();
    const warmDir = join(cp!.dataDir, "gvisor-warm");
    await waitFor(() => existsSync(warmDir) && readdirSync(warmDir).some((d) => !d.startsWith(".")), "the warm-start image to be built");

    const [a, b] = await Promise.all([1, 2].map((i) => Sandbox.create("base", { timeoutMs: 300_000, envs: { WHICH: `s${i}` } })));
    const seen = new Set<string>();
    for (const [s, which] of [[a!, "s1"], [b!, "s2"]] as const) {
      expect(persisted(s.sandboxId).restored).toBe(true);
      const r = await s.commands.run("hostname; echo $WHICH; ip -4 -o addr show eth0 | awk '{print $4}'; whoami");
      const [host, env, addr, user] = r.stdout.trim().split("\n");
      expect(host).toBe(s.sandboxId);
      expect(env).toBe(which);
      expect(user).toBe("user");
      seen.add(addr!);
      await s.files.write("/home/user/mine.txt", s.sandboxId);
    }
    expect(seen.size).toBe(2);
    expect(new Set([token(first), token(a!), token(b!)]).size).toBe(3);
    expect(await a!.files.read("/home/user/mine.txt")).toBe(a!.sandboxId);
    expect(await b!.files.read("/home/user/mine.txt")).toBe(b!.sandboxId);
    expect(await first.files.exists("/home/user/mine.txt")).toBe(false);
    // Another sandbox's token is refused by a restored one.
    const res = await fetch(`${cp!.url}/health`, { headers: { "E2b-Sandbox-Id": a!.sandboxId, "E2b-Sandbox-Port": "49983" } });
    expect(res.status).toBe(204);
    const wrong = await fetch(`${cp!.url}/envs`, { headers: { "E2b-Sandbox-Id": a!.sandboxId, "E2b-Sandbox-Port": "49983", "X-Access-Token": token(b!) } });
    expect(wrong.status).toBe(401);
    for (const s of [first, a!, b!]) await s.kill();
  });
});

describe.skipIf(missing !== undefined)(`gvisor: a template's start command in its warm-start checkpoint${why}`, { timeout: 600_000 }, () => {
  let cp: TestControlPlane | undefined;
  let restore = () => {};
  beforeAll(async () => {
    cp = await startTestControlPlane({ runtime: gvisorRuntime(), imagesDir: testImagesDir(), warmPool: 0 });
    restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  }, 300_000);
  afterAll(async () => {
    restore();
    await cp?.close();
  });
  const persisted = (id: string) => cp!.manager.get(id).runtimeData as unknown as PersistedGvisorInstance;

  it("a restored create's start command was running before the create: its server answers at once", async () => {
    const name = `gv-start-${process.pid}`;
    // The build runs in a gVisor sandbox too.
    await Template.build(
      Template()
        .fromTemplate("base")
        .runCmd("mkdir -p /home/user/site && echo gvisor-served > /home/user/site/index.html")
        .setStartCmd("cd /home/user/site && date +%s%N > /home/user/started-at && python3 -m http.server 8090", waitForPort(8090)),
      name,
    );
    const first = await Sandbox.create(name, { timeoutMs: 300_000 });
    expect((await first.commands.run("curl -s http://127.0.0.1:8090/")).stdout).toBe("gvisor-served\n");
    const warmDir = join(cp!.dataDir, "gvisor-warm");
    await waitFor(() => existsSync(warmDir) && readdirSync(warmDir).some((d) => !d.startsWith(".") && d.includes("-w")), "the warm-start image with the start command to be built");
    const before = BigInt(Date.now()) * 1_000_000n;
    const restored = await Sandbox.create(name, { timeoutMs: 300_000 });
    expect(persisted(restored.sandboxId).restored).toBe(true);
    const res = await fetch(`${cp!.url}/`, { headers: { "E2b-Sandbox-Id": restored.sandboxId, "E2b-Sandbox-Port": "8090" } });
    expect(await res.text()).toBe("gvisor-served\n");
    // The server was started in the checkpoint's sandbox, before this create.
    expect(BigInt((await restored.files.read("/home/user/started-at")).trim())).toBeLessThan(before);
    // A create with env vars of its own boots and runs the start command itself (it must see them).
    const withEnvs = await Sandbox.create(name, { timeoutMs: 300_000, envs: { MINE: "1" } });
    expect(BigInt((await withEnvs.files.read("/home/user/started-at")).trim())).toBeGreaterThan(before);
    for (const s of [first, restored, withEnvs]) await s.kill();
  });
});
