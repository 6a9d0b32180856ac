// Real Firecracker microVMs through the firecracker runtime: boots the guest
// kernel and template image, reaches envd over Firecracker's vsock socket,
// pauses (full snapshot, process stopped) and resumes (snapshot load), kills.
// Runs only where a firecracker binary and hardware KVM exist (not on the
// project's CI machines: /dev/kvm there is PVM); it says what is missing.
// test/control-plane/firecracker-api.test.ts covers the API requests anywhere.
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { findKernel, findTemplateImage, imagesDir } from "../../control-plane/images/layout.js";
import { FirecrackerRuntime } from "../../control-plane/runtimes/firecracker/firecracker-runtime.js";
import { findFirecracker, probeKvm } from "../../control-plane/runtimes/firecracker/host.js";
import type { FirecrackerInstance } from "../../control-plane/runtimes/firecracker/instance.js";
import { isRunning } from "../../control-plane/runtimes/process/procfs.js";
import { EnvdClient } from "../../control-plane/transport/envd-client.js";
import { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { Transport } from "../../control-plane/transport/transport.js";
import { ENVD_PORT } from "../../envd/version.js";
import { Process } from "../../gen/ts/process/process_pb.js";
import { startTestControlPlane } from "../helpers/control-plane.js";
import { health, instanceSpec } from "../helpers/firecracker-fixture.js";
import { setEnv } from "../helpers/sdk.js";
import { run } from "../helpers/process.js";

const TEMPLATE = process.env.LOCALE2B_TEST_TEMPLATE || "base";
const missing: string[] = [];
const fc = findFirecracker();
if ("missing" in fc) missing.push("no firecracker binary (LOCALE2B_FIRECRACKER is unset or wrong and there is no 'firecracker' on PATH)");
const kvm = await probeKvm();
if (!kvm.ok) missing.push(`no hardware KVM (${kvm.reason})`);
if (!findKernel()) missing.push("no guest kernel (LOCALE2B_KERNEL unset and none built in the image cache)");
if (!findTemplateImage(TEMPLATE)) missing.push(`no '${TEMPLATE}' template image in ${join(imagesDir(), "templates")}`);
const skip = missing.length > 0;
if (skip) process.stderr.write(`firecracker-real.test.ts: skipped: ${missing.join("; ")}\n`);

describe.skipIf(skip)(`firecracker runtime, real microVMs${skip ? ` (skipped: ${missing.join("; ")})` : ""}`, () => {
  const root = skip ? "" : mkdtempSync(join(tmpdir(), "l2b-fcvm-"));
  const log = pino({ level: process.env.LOCALE2B_TEST_LOG_LEVEL ?? "silent" });
  const transport = new Transport();
  const envd = new EnvdClient();
  const live: FirecrackerInstance[] = [];

  afterAll(async () => {
    for (const inst of live) await inst.kill().catch(() => undefined);
    transport.destroy();
    if (root) rmSync(root, { recursive: true, force: true });
  });

  async function sh(id: string, inst: FirecrackerInstance, token: string, command: string): Promise<string> {
    const agent = transport.local(id, inst.socketPath, inst.pauseConnections).agent();
    const client = createClient(Process, createConnectTransport({ baseUrl: "http://envd", httpVersion: "1.1", nodeOptions: { agent } }));
    const r = await run(client, command, {}, { "x-access-token": token });
    if (r.end?.exitCode !== 0) throw new Error(`'${command}' exited ${r.end?.exitCode}: ${r.stderr}`);
    return r.stdout.trim();
  }

  it("boots, serves envd over vsock, survives a snapshot pause and resume, and is killed", async () => {
    const runtime = new FirecrackerRuntime();
    const spec = instanceSpec(root, log, { templateId: TEMPLATE, cpuCount: 1, memoryMB: 512, diskSizeMB: 1024, allowInternetAccess: false });
    const id = spec.sandboxId;
    const inst = await runtime.create(spec);
    live.push(inst);

    const endpoint = transport.local(id, inst.socketPath, inst.pauseConnections);
    await envd.waitReady(endpoint, 60_000, () => inst.alive());
    expect(await health(new HybridVsockAgent(inst.socketPath, ENVD_PORT))).toBe(204);
    const token = `tok-${id}`;
    const init = await envd.request(endpoint, { method: "POST", path: "/init", body: { accessToken: token, timestamp: new Date().toISOString() } });
    expect(init.status).toBe(204);
    expect(await sh(id, inst, token, "cat /proc/cmdline")).toContain(`l2b.hostname=${id}`);
    await sh(id, inst, token, "echo before-pause > /tmp/marker");

    const firstPid = inst.pid;
    await inst.pause();
    endpoint.drop(); // what the endpoint's `drop` pause policy does for runtimes whose resume resets vsock connections
    expect(isRunning(firstPid)).toBe(false);
    expect(inst.persisted).toMatchObject({ paused: true });

    await inst.resume();
    expect(inst.pid).not.toBe(firstPid);
    await envd.waitReady(endpoint, 30_000, () => inst.alive());
    expect(await health(inst.socketPath)).toBe(204);
    expect(await sh(id, inst, token, "cat /tmp/marker")).toBe("before-pause"); // memory and disk came back

    const stats = await inst.stats();
    expect(stats.memUsedBytes).toBeGreaterThan(0);
    expect(stats.memTotalBytes).toBe(512 * 1024 * 1024);
    expect((await inst.logs()).length).toBeGreaterThan(0);

    const pid = inst.pid;
    await inst.kill();
    transport.forget(id);
    expect(isRunning(pid)).toBe(false);
    expect(await inst.alive()).toBe(false);
  }, 180_000);
});

describe.skipIf(skip)(`firecracker runtime, real microVMs, E2B's fork with the JS SDK${skip ? ` (skipped: ${missing.join("; ")})` : ""}`, () => {
  it("a fork of 2: each its own id, hostname and address, the parent's counter going on in each, files of the instant", async () => {
    const cp = await startTestControlPlane({ runtime: new FirecrackerRuntime() });
    const restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    try {
      const src = await Sandbox.create(TEMPLATE, { timeoutMs: 600_000 });
      await src.files.write("/home/user/fork.txt", "of the instant");
      await src.commands.run("sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.1; done'", { background: true, timeoutMs: 0 });
      const forks = await Sandbox.fork(src.sandboxId, { count: 2, timeoutMs: 600_000 });
      const seen = new Set<string>();
      for (const f of forks) {
        if (!(f instanceof Sandbox)) throw f;
        const out = await f.commands.run("hostname; cat /home/user/fork.txt; ip -4 -o addr show dev eth0 | awk '{print $4}'");
        const [host, text, addr] = out.stdout.trim().split("\n");
        expect(host).toBe(f.sandboxId);
        expect(text).toBe("of the instant");
        seen.add(addr!);
        const c1 = Number((await f.files.read("/tmp/counter")).trim());
        await expect.poll(async () => Number((await f.files.read("/tmp/counter")).trim()), { timeout: 30_000 }).toBeGreaterThan(c1);
        await f.kill();
      }
      expect(seen.size).toBe(2);
      await src.kill();
    } finally {
      restore();
      await cp.close();
    }
  }, 300_000);
});
