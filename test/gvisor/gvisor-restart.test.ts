// A control-plane restart with gVisor sandboxes running: runsc detaches them,
// so they live on; the next start re-adopts them (the same hybrid-vsock
// socket, runsc state under each sandbox's directory), one paused to disk
// stays paused and is restored from its checkpoint, and one killed while the server was down is marked
// dead with nothing of it left behind.
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { PersistedGvisorInstance } from "../../control-plane/runtimes/gvisor/instance.js";
import { vethUnsupported } from "../../control-plane/runtimes/net/veth.js";
import { cmdline, isRunning } from "../../control-plane/runtimes/process/procfs.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { setEnv, waitFor } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";

describe.skipIf(missing !== undefined)(`gvisor runtime across a control-plane restart${why}`, () => {
  it("re-adopts running and paused sandboxes; one killed while the server was down is dead and cleaned up", { timeout: 300_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-gvisor-restart-"));
    const apiKey = `e2b_${"d".repeat(40)}`;
    const start = () => startTestControlPlane({ dataDir, apiKey, runtime: gvisorRuntime(), imagesDir: testImagesDir() });
    let cp: TestControlPlane = await start();
    let restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    const [running, paused, doomed] = await Promise.all([1, 2, 3].map(() => Sandbox.create("base", { timeoutMs: 600_000 })));
    try {
      await running!.files.write("/home/user/before.txt", "before the restart");
      const ticker = await running!.commands.run("i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done", { background: true, timeoutMs: 0 });
      expect(await paused!.pause()).toBe(true);
      const sentry = (id: string) => cp.manager.get(id).runtimeData as unknown as PersistedGvisorInstance;
      const doomedSentry = sentry(doomed!.sandboxId);
      restore();
      expect(isRunning(sentry(running!.sandboxId).pid, sentry(running!.sandboxId).startTime)).toBe(true);
      expect(sentry(paused!.sandboxId).checkpointed).toBe(true); // paused to disk: no sentry, a checkpoint image
      // Stop the server (not its sandboxes), kill one sandbox's sentry while it is down, start again.
      await cp.stopKeepingSandboxes();
      process.kill(doomedSentry.pid, "SIGKILL");
      cp = await start();
      restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });

      expect((await cp.store.getSandbox(running!.sandboxId))!.state).toBe("running");
      const again = await Sandbox.connect(running!.sandboxId);
      expect(await again.files.read("/home/user/before.txt")).toBe("before the restart");
      // The process started before the restart still runs.
      expect((await again.commands.list()).some((p) => p.pid === ticker.pid)).toBe(true);
      const n = Number((await again.commands.run("cat /tmp/count")).stdout);
      await waitFor(async () => Number((await again.commands.run("cat /tmp/count")).stdout) > n, "the counter to go on");

      expect((await cp.store.getSandbox(paused!.sandboxId))!.state).toBe("paused");
      const resumed = await Sandbox.connect(paused!.sandboxId); // connect resumes
      expect((await resumed.commands.run("echo resumed")).stdout).toBe("resumed\n");

      expect((await cp.store.getSandbox(doomed!.sandboxId))!.state).toBe("killed");
      expect(existsSync(join(dataDir, "sandboxes", doomed!.sandboxId))).toBe(false);
      expect(existsSync(`/run/netns/${doomedSentry.netns}`)).toBe(false);
    } finally {
      restore();
      await cp.close(); // kills what is left
      // Whatever a failure left between the two servers: no sandbox outlives the test.
      for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d)).map(Number)) {
        if (cmdline(pid).some((a) => a.includes(dataDir))) process.kill(pid, "SIGKILL");
      }
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
  it("a create the server died in (no record of it) is cleaned up at the next start: no sentry, network namespace or veth is left", { timeout: 300_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-gvisor-cut-"));
    const rt = gvisorRuntime();
    const sandboxId = `icutshort${randomBytes(6).toString("hex")}`;
    // Where a server puts a sandbox (the runtime keeps its warm-start images beside `sandboxes/`).
    const dir = join(dataDir, "sandboxes", sandboxId);
    const log = pino({ level: "silent" });
    // With an egress policy the sandbox gets a named network namespace and a veth, which outlive its sentry.
    const withNet = vethUnsupported() === undefined;
    const spec = { sandboxId, templateId: "base", cpuCount: 1, memoryMB: 256, diskSizeMB: 1024, dir, allowInternetAccess: false, log };
    // A cold start, and no warm-start image built in the background meanwhile: this is about one sandbox's leftovers.
    const restoreEnv = setEnv({ LOCALE2B_GVISOR_WARM_START: "0" });
    const inst = await rt.create(withNet ? { ...spec, egress: { allow: [], deny: [] } } : spec).finally(restoreEnv);
    try {
      const p = inst.persisted as unknown as PersistedGvisorInstance;
      expect(isRunning(p.pid, p.startTime)).toBe(true);
      if (withNet) {
        expect(existsSync(`/run/netns/${p.netns}`)).toBe(true);
        expect(existsSync(`/sys/class/net/${p.net!.device}`)).toBe(true);
      }
      // The server died before the store had the instance's record: the next start adopts with none.
      expect(await rt.adopt(sandboxId, dir, {}, log)).toBeUndefined();
      await waitFor(() => !isRunning(p.pid, p.startTime), "the sentry to be gone");
      if (withNet) {
        expect(existsSync(`/run/netns/${p.netns}`), "the network namespace is deleted").toBe(false);
        expect(existsSync(`/sys/class/net/${p.net!.device}`), "the veth is gone").toBe(false);
      }
    } finally {
      await inst.kill().catch(() => undefined);
      await rt.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
