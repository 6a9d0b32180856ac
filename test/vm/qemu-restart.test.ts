// A control-plane restart with microVMs running: QEMU and vhost-device-vsock
// are detached, so the VMs live on; the next start re-adopts them (QMP again,
// the same vsock socket), a paused one stays paused and resumes, and a VM
// that died meanwhile is marked dead.
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import pino from "pino";
import { describe, expect, it } from "vitest";
import type { PersistedQemuInstance } from "../../control-plane/runtimes/qemu/instance.js";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { tapUnsupported } from "../../control-plane/runtimes/qemu/tap.js";
import { cmdline, isRunning } from "../../control-plane/runtimes/process/procfs.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

const missing = qemuMissing();
const waitUntil = async (ok: () => boolean) => {
  while (!ok()) await new Promise((r) => setTimeout(r, 50));
};
const why = missing ? ` [skipped: ${missing}; runs where the qemu suite runs]` : "";

describe.skipIf(missing !== undefined)(`qemu runtime across a control-plane restart${why}`, () => {
  it("re-adopts running and paused VMs; a VM killed while the server was down is dead", { timeout: 300_000 }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-qemu-restart-"));
    const apiKey = `e2b_${"c".repeat(40)}`;
    const start = () => startTestControlPlane({ dataDir, apiKey, runtime: new QemuRuntime({ imagesDir: testImagesDir() }) });
    let cp: TestControlPlane = await start();
    let restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    const [running, paused, doomed] = await Promise.all([1, 2, 3].map(() => Sandbox.create("base", { timeoutMs: 600_000 })));
    try {
      await running!.files.write("/home/user/before.txt", "before the restart");
      // A stream kept open across the pause: the stopping server must close it without breaking the stopped VM's vsock.
      const lines: string[] = [];
      const ticker = await paused!.commands.run("while true; do echo tick; sleep 0.3; done", { background: true, timeoutMs: 0, onStdout: (d) => void lines.push(d) });
      await waitUntil(() => lines.length > 0);
      expect(await paused!.pause()).toBe(true);
      const qemuOf = (id: string) => (cp.manager.get(id).runtimeData as PersistedQemuInstance).qemu;
      const doomedQemu = qemuOf(doomed!.sandboxId);
      // Stop the server (not its sandboxes), kill one VM while it is down, start again.
      restore();
      for (const s of [running!, paused!]) expect(isRunning(qemuOf(s.sandboxId).pid, qemuOf(s.sandboxId).startTime)).toBe(true);
      await cp.stopKeepingSandboxes();
      process.kill(doomedQemu.pid, "SIGKILL");
      cp = await start();
      restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });

      expect((await cp.store.getSandbox(running!.sandboxId))!.state).toBe("running");
      const again = await Sandbox.connect(running!.sandboxId);
      expect(await again.files.read("/home/user/before.txt")).toBe("before the restart");
      expect((await again.commands.run("echo alive")).stdout).toBe("alive\n");

      expect((await cp.store.getSandbox(paused!.sandboxId))!.state).toBe("paused");
      const resumed = await Sandbox.connect(paused!.sandboxId); // connect resumes
      expect((await resumed.commands.run("echo resumed")).stdout).toBe("resumed\n");
      expect((await resumed.commands.list()).some((p) => p.pid === ticker.pid)).toBe(true); // it ran on across the pause

      expect((await cp.store.getSandbox(doomed!.sandboxId))!.state).toBe("killed");
    } finally {
      restore();
      await cp.close(); // kills what is left
      // Whatever a failure left between the two servers: no VM outlives the test.
      for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d)).map(Number)) {
        if (cmdline(pid).some((a) => a.includes(dataDir))) process.kill(pid, "SIGKILL");
      }
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("a create the server died in (no record of its VM) is stopped at the next start: no QEMU, vhost or tap is left", { timeout: 300_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "locale2b-qemu-cut-"));
    const rt = new QemuRuntime({ imagesDir: testImagesDir() });
    const sandboxId = `icutshort${randomBytes(6).toString("hex")}`;
    const log = pino({ level: "silent" });
    // With an egress policy the VM gets a tap (where the host can make one), which outlives its QEMU.
    const withTap = tapUnsupported() === undefined;
    const spec = { sandboxId, templateId: "base", cpuCount: 1, memoryMB: 256, diskSizeMB: 1024, dir, allowInternetAccess: false, log };
    const inst = await rt.create(withTap ? { ...spec, egress: { allow: [], deny: [] } } : spec);
    try {
      const { qemu, vhost, tap } = inst.persisted;
      expect(isRunning(qemu.pid, qemu.startTime) && isRunning(vhost.pid, vhost.startTime)).toBe(true);
      if (withTap) expect(existsSync(`/sys/class/net/${tap!.name}`)).toBe(true);
      // The server died before the store had the instance's record: the next start adopts with none.
      expect(await rt.adopt(sandboxId, dir, {}, log)).toBeUndefined();
      await waitUntil(() => !isRunning(qemu.pid, qemu.startTime) && !isRunning(vhost.pid, vhost.startTime));
      if (withTap) expect(existsSync(`/sys/class/net/${tap!.name}`), "the tap is released").toBe(false);
    } finally {
      await inst.kill().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
