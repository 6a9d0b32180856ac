// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The firecracker runtime, driven directly against a MOCK Firecracker
// (test/helpers/mock-firecracker.ts): Firecracker cannot run on this
// project's machines (no binary, no hardware KVM). The mock validates every
// API request against ../shared/firecracker/firecracker-swagger.yaml and
// proxies the vsock socket to a real envd, so what is proven here is: the
// exact API sequence and bodies the runtime sends, its error handling and
// clean-up, and the control plane's path to envd over the VM's vsock socket.
// test/vm/firecracker-real.test.ts boots real VMs where that is possible.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FirecrackerApi, FirecrackerApiError } from "../../control-plane/runtimes/firecracker/api-client.js";
import { FirecrackerRuntime } from "../../control-plane/runtimes/firecracker/firecracker-runtime.js";
import { probeKvm } from "../../control-plane/runtimes/firecracker/host.js";
import type { FirecrackerInstance } from "../../control-plane/runtimes/firecracker/instance.js";
import { firecrackerLaunch, spawnVmm, waitForSocket } from "../../control-plane/runtimes/firecracker/vmm-process.js";
import { isRunning, waitFor } from "../../control-plane/runtimes/process/procfs.js";
import { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { ENVD_PORT } from "../../envd/version.js";
import { haveNft, nftChain } from "../helpers/egress.js";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { capturingLogger, cleanUpFirecrackerSuite, fakeImages, health, instanceSpec, MiB, overrideEnv } from "../helpers/firecracker-fixture.js";
import { mockFirecrackerBin } from "../helpers/firecracker-mock-bin.js";
import { FirecrackerSpec, findFirecrackerSpec } from "../helpers/firecracker-spec.js";
import { calls, expectValid as expectValidRequests, readRequests, type RecordedRequest } from "../helpers/firecracker-requests.js";

const SPEC_PATH = findFirecrackerSpec();
const haveSpec = existsSync(SPEC_PATH);
if (!haveSpec) process.stderr.write(`firecracker-api.test.ts: skipped, the Firecracker API spec ${SPEC_PATH} was not found\n`);

describe.skipIf(!haveSpec)(`firecracker runtime against a mock Firecracker${haveSpec ? "" : ` (skipped: ${SPEC_PATH} not found)`}`, () => {
  let root: string;
  let requestLog: string;
  let envd: TestEnvd;
  let images: ReturnType<typeof fakeImages>;
  let spec: FirecrackerSpec;
  let runtime: FirecrackerRuntime;
  const { log, lines: logLines } = capturingLogger();
  const live: FirecrackerInstance[] = [];
  let restoreEnv = () => {};

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "l2b-fc-"));
    requestLog = join(root, "requests.jsonl");
    images = fakeImages(root);
    spec = new FirecrackerSpec(SPEC_PATH);
    envd = await startTestEnvd({ listen: ["tcp://127.0.0.1:0"] });
    restoreEnv = overrideEnv({
      LOCALE2B_FIRECRACKER: mockFirecrackerBin(),
      MOCK_FIRECRACKER_SPEC: SPEC_PATH,
      MOCK_FIRECRACKER_LOG: requestLog,
      MOCK_FIRECRACKER_ENVD: new URL(envd.url).host,
    });
    runtime = new FirecrackerRuntime({ vmmEnv: process.env, imagesDir: images.imagesDir, kernel: images.kernel, apiTimeoutMs: 5_000 });
  });

  afterAll(async () => {
    restoreEnv();
    await envd?.close();
    expect(await cleanUpFirecrackerSuite(root, live)).toEqual([]); // every test cleaned up its Firecracker processes
  });

  const requests = () => readRequests(requestLog);
  const requestsOf = (vmId: string) => requests().filter((r) => r.vmId === vmId);
  const expectValid = (recs: RecordedRequest[]) => expectValidRequests(spec, recs);

  async function create(over: Parameters<typeof instanceSpec>[2] = {}, rt = runtime): Promise<FirecrackerInstance> {
    const inst = await rt.create(instanceSpec(root, log, over));
    live.push(inst);
    return inst;
  }

  it("create: machine-config, boot-source, drives/rootfs, vsock, InstanceStart, each valid per the spec; envd answers over vsock", async () => {
    const before = requests().length;
    const startedAt = Date.now();
    const inst = await create({ cpuCount: 2, memoryMB: 256, diskSizeMB: 64 });
    const id = inst.sandboxId;
    const dir = join(root, "sandboxes", id);
    const recs = requests().slice(before).filter((r) => r.vmId === id);
    expectValid(recs);
    expect(calls(recs)).toEqual([
      "PUT /machine-config 204",
      "PUT /boot-source 204",
      "PUT /drives/rootfs 204",
      "PUT /vsock 204",
      "PUT /actions 204",
    ]);
    const [machine, boot, drive, vsock, start] = recs.map((r) => r.body);
    expect(machine).toEqual({ vcpu_count: 2, mem_size_mib: 256, smt: false });
    expect(boot!.kernel_image_path).toBe(images.kernel);
    const args = String(boot!.boot_args).split(" ");
    expect(args).toEqual(expect.arrayContaining(["console=ttyS0", "reboot=k", "panic=1", "pci=off", "root=/dev/vda", "rw", "init=/sbin/locale2b-init", `l2b.hostname=${id}`]));
    expect(args.find((a) => a.startsWith("l2b.epoch="))).toMatch(/^l2b\.epoch=\d{10}$/);
    // Paths from Firecracker's working directory, the sandbox's: a snapshot restored elsewhere (a fork) opens its own files.
    expect(drive).toEqual({ drive_id: "rootfs", path_on_host: "rootfs.ext4", is_root_device: true, is_read_only: false });
    expect(vsock).toEqual({ guest_cid: 3, uds_path: "vsock.sock" });
    expect(start).toEqual({ action_type: "InstanceStart" });

    // The Instance: envd through Firecracker's own hybrid-vsock socket.
    expect(inst.socketPath).toBe(join(dir, "vsock.sock"));
    expect(inst.pauseConnections).toBe("drop");
    expect(await health(inst.socketPath)).toBe(204);
    expect(await inst.alive()).toBe(true);
    expect(inst.persisted).toMatchObject({ pid: inst.pid, apiSock: join(dir, "fc.sock"), vsock: join(dir, "vsock.sock"), paused: false });
    expect(recs.every((r) => r.pid === inst.pid)).toBe(true);

    // The disk: a copy of the template (reflink where possible, said in a debug line), grown to diskSizeMB.
    expect(statSync(join(dir, "rootfs.ext4")).size).toBe(images.ext4 ? 64 * MiB : 16 * MiB);
    expect(logLines.some((l) => /root disk: (copy-on-write|the filesystem cannot reflink)/.test(String(l.msg)))).toBe(true);
    const stats = await inst.stats();
    expect(stats).toMatchObject({ cpuCount: 2, memTotalBytes: 256 * MiB, diskTotalBytes: statSync(join(dir, "rootfs.ext4")).size });
    expect(stats.memUsedBytes).toBeGreaterThan(0);
    expect(inst.hostMemoryBytes()).toBeGreaterThan(0);

    // The console: Firecracker's lines and the (mock) kernel's, timestamped.
    const logs = await inst.logs();
    const kernelLine = logs.find((l) => l.line.includes("Linux version"));
    expect(kernelLine).toBeDefined();
    // Stamped while this test ran (bracketed by clock reads, however slow the machine; 1 s for the stamp's rounding).
    expect(kernelLine!.timestamp).toBeGreaterThanOrEqual(startedAt - 1_000);
    expect(kernelLine!.timestamp).toBeLessThanOrEqual(Date.now());
    expect(logs.some((l) => l.line.includes("Running Firecracker"))).toBe(true);
  });

  it("pause snapshots and stops the VMM; resume loads the snapshot into a new one; kill cleans up", async () => {
    const inst = await create({ memoryMB: 128 });
    const id = inst.sandboxId;
    const dir = join(root, "sandboxes", id);
    const agent = new HybridVsockAgent(inst.socketPath, ENVD_PORT);
    expect(await health(agent)).toBe(204);
    const pooled = Object.values(agent.freeSockets).flat();
    expect(pooled.length).toBe(1);
    const firstPid = inst.pid;

    let seq = requests().length;
    await inst.pause();
    let recs = requests().slice(seq);
    expectValid(recs);
    expect(calls(recs)).toEqual(["PATCH /vm 204", "PUT /snapshot/create 204"]);
    expect(recs[0]!.body).toEqual({ state: "Paused" });
    expect(recs[1]!.body).toEqual({ snapshot_type: "Full", snapshot_path: join("snapshot", "vmstate"), mem_file_path: join("snapshot", "memory") });
    expect(isRunning(firstPid)).toBe(false);
    expect(existsSync(join(dir, "fc.sock")) || existsSync(join(dir, "vsock.sock"))).toBe(false);
    expect(statSync(join(dir, "snapshot", "memory")).size).toBe(128 * MiB);
    expect(inst.persisted).toMatchObject({ paused: true, pid: 0 });
    expect(JSON.parse(readFileSync(join(dir, "firecracker.json"), "utf8"))).toMatchObject({ paused: true });
    expect(await inst.alive()).toBe(true);
    expect((await inst.stats()).memUsedBytes).toBe(0);
    expect(inst.hostMemoryBytes()).toBe(0);
    await expect(health(inst.socketPath)).rejects.toThrow(/ENOENT/);
    await waitFor(() => pooled.every((s) => s?.destroyed), 2_000);
    expect(pooled.every((s) => s?.destroyed)).toBe(true); // the VMM's death reset the pooled connection

    seq = requests().length;
    await inst.pause(); // idempotent
    expect(requests().length).toBe(seq);

    await inst.resume();
    recs = requests().slice(seq);
    expectValid(recs);
    expect(inst.pid).not.toBe(firstPid);
    expect(calls(recs)).toEqual(["PUT /snapshot/load 204"]);
    expect(recs[0]!.pid).toBe(inst.pid);
    expect(recs[0]!.body).toEqual({
      snapshot_path: join("snapshot", "vmstate"),
      mem_backend: { backend_type: "File", backend_path: join("snapshot", "memory") },
      resume_vm: true,
      vsock_override: { uds_path: "vsock.sock" },
    });
    expect(inst.socketPath).toBe(join(dir, "vsock.sock")); // same path: it is in the snapshot
    expect(await health(agent)).toBe(204); // the agent redials
    expect(await inst.alive()).toBe(true);
    expect(inst.persisted).toMatchObject({ paused: false, pid: inst.pid });

    // A second cycle: the old snapshot is replaced, not overwritten in place.
    const oldMemIno = statSync(join(dir, "snapshot", "memory")).ino;
    await inst.pause();
    expect(statSync(join(dir, "snapshot", "memory")).ino).not.toBe(oldMemIno);
    await inst.resume();
    expect(await health(inst.socketPath)).toBe(204);

    const pid = inst.pid;
    await inst.kill();
    agent.destroy();
    expect(isRunning(pid)).toBe(false);
    for (const f of ["fc.sock", "vsock.sock", "rootfs.ext4", "snapshot", "firecracker.json"]) expect(existsSync(join(dir, f)), f).toBe(false);
    expect(existsSync(join(dir, "console.log"))).toBe(true);
    expect(await inst.alive()).toBe(false);
    await inst.kill(); // idempotent
  });

  it("reports a VMM that dies on its own once, through onExit", async () => {
    const inst = await create();
    const reasons: string[] = [];
    inst.onExit((r) => reasons.push(r));
    process.kill(inst.pid, "SIGKILL");
    await waitFor(() => reasons.length > 0, 3_000);
    await new Promise((r) => setTimeout(r, 700)); // the 500 ms watch must not report it again
    expect(reasons).toHaveLength(1);
    expect(reasons[0]).toMatch(/firecracker was killed by SIGKILL/);
    expect(await inst.alive()).toBe(false);
    await inst.kill();
  });

  it("adopt re-attaches to a running VM (pid + start time + API socket) and to a paused one, from the newest state", async () => {
    const inst = await create();
    const id = inst.sandboxId;
    const dir = join(root, "sandboxes", id);
    const stale = inst.persisted;
    const other = new FirecrackerRuntime({ vmmEnv: process.env, imagesDir: images.imagesDir, kernel: images.kernel });

    const adopted = await other.adopt(id, dir, stale, log);
    expect(adopted?.pid).toBe(inst.pid);
    expect(await health(adopted!.socketPath)).toBe(204);

    await inst.pause();
    // The store's copy still says running; the state file in the dir is newer and wins.
    const paused = await other.adopt(id, dir, stale, log);
    expect(paused?.paused).toBe(true);
    expect(await paused!.alive()).toBe(true);
    await paused!.resume();
    live.push(paused!);
    expect(await health(paused!.socketPath)).toBe(204);

    // Not ours: another sandbox's id, or a record whose pid is gone.
    expect(await other.adopt("fnotthisone", dir, stale, log)).toBeUndefined();
    await paused!.kill();
    expect(await other.adopt(id, dir, stale, log)).toBeUndefined();
    expect(await other.adopt(id, dir, {}, log)).toBeUndefined();
  });

  it("adopt after a restart that caught a pause after its snapshot, or a resume before its load", async () => {
    const other = new FirecrackerRuntime({ vmmEnv: process.env, imagesDir: images.imagesDir, kernel: images.kernel });
    const writeState = (dir: string, p: Record<string, unknown>) =>
      writeFileSync(join(dir, "firecracker.json"), JSON.stringify({ ...p, updatedAt: Date.now() + 1_000 }));

    // 1. The snapshot was written and recorded, the process not yet stopped: the VM is Paused in memory.
    const a = await create();
    const aDir = join(root, "sandboxes", a.sandboxId);
    const api = new FirecrackerApi(join(aDir, "fc.sock"));
    await api.pauseVm();
    mkdirSync(join(aDir, "snapshot"));
    await api.createSnapshot({ snapshot_type: "Full", snapshot_path: join(aDir, "snapshot", "vmstate"), mem_file_path: join(aDir, "snapshot", "memory") });
    writeState(aDir, { ...a.persisted, paused: true });
    const adoptedA = await other.adopt(a.sandboxId, aDir, a.persisted, log);
    expect(adoptedA).toMatchObject({ paused: false, pid: a.pid });
    live.push(adoptedA!);
    await adoptedA!.pause(); // what the manager does for a sandbox it left 'pausing'
    expect(isRunning(a.pid)).toBe(false);
    await adoptedA!.resume();
    expect(await health(adoptedA!.socketPath)).toBe(204);
    await adoptedA!.kill();

    // 2. A resume started a new Firecracker but had not loaded the snapshot: the snapshot is the truth.
    const b = await create();
    const bDir = join(root, "sandboxes", b.sandboxId);
    await b.pause();
    const stray = spawnVmm(
      { ...firecrackerLaunch(mockFirecrackerBin(), join(bDir, "fc.sock"), b.sandboxId), env: process.env },
      join(bDir, "console.log"),
      bDir,
      log,
    );
    await waitForSocket(join(bDir, "fc.sock"), stray, join(bDir, "console.log"), "its API socket");
    writeState(bDir, { ...b.persisted, pid: stray.pid, startTime: stray.startTime });
    const adoptedB = await other.adopt(b.sandboxId, bDir, b.persisted, log);
    expect(adoptedB).toMatchObject({ paused: true, pid: 0 });
    live.push(adoptedB!);
    expect(isRunning(stray.pid, stray.startTime)).toBe(false);
    await adoptedB!.resume();
    expect(await health(adoptedB!.socketPath)).toBe(204);
    await adoptedB!.kill();
  });

  it("an API fault surfaces as a clear error naming the call and leaves no process behind", async () => {
    process.env.MOCK_FIRECRACKER_FAIL = "PUT /drives/rootfs";
    const s = instanceSpec(root, log);
    let err: unknown;
    try {
      err = await runtime.create(s).catch((e: unknown) => e);
    } finally {
      delete process.env.MOCK_FIRECRACKER_FAIL;
    }
    expect(err).toBeInstanceOf(FirecrackerApiError);
    expect((err as Error).message).toMatch(
      /^firecracker API PUT \/drives\/rootfs failed \(HTTP 400\): mock-firecracker: injected fault for PUT \/drives\/rootfs/,
    );
    expect(err).toMatchObject({ call: "PUT /drives/rootfs", status: 400 });
    expect(calls(requestsOf(s.sandboxId))).toEqual([
      "PUT /machine-config 204",
      "PUT /boot-source 204",
      "PUT /drives/rootfs 400",
    ]);
    const pids = [...new Set(requestsOf(s.sandboxId).map((r) => r.pid))];
    expect(pids).toHaveLength(1);
    expect(isRunning(pids[0]!)).toBe(false);
    for (const f of ["fc.sock", "vsock.sock", "rootfs.ext4"]) expect(existsSync(join(s.dir, f)), f).toBe(false);

  });

  it("an API call that never answers times out with a clear error, and the VMM is killed", async () => {
    process.env.MOCK_FIRECRACKER_HANG = "PUT /boot-source";
    const s = instanceSpec(root, log);
    const quick = new FirecrackerRuntime({ vmmEnv: process.env, imagesDir: images.imagesDir, kernel: images.kernel, apiTimeoutMs: 300 });
    try {
      await expect(quick.create(s)).rejects.toThrow(/firecracker API PUT \/boot-source did not answer within 300 ms/);
    } finally {
      delete process.env.MOCK_FIRECRACKER_HANG;
    }
    const pids = [...new Set(requestsOf(s.sandboxId).map((r) => r.pid))];
    expect(pids.length).toBe(1);
    expect(isRunning(pids[0]!)).toBe(false);
    // No socket at all: a clear error too.
    await expect(new FirecrackerApi(join(root, "none.sock")).describeInstance()).rejects.toThrow(/GET \/ failed: cannot talk to .*none\.sock \(ENOENT\)/);
  });

  it("a missing binary: 'firecracker not found … see docs/microvms.md / scripts/setup-host'", async () => {
    const hint = /firecracker not found.*see docs\/microvms\.md \/ scripts\/setup-host/;
    for (const env of [{ LOCALE2B_FIRECRACKER: join(root, "no-such-firecracker") }, { PATH: join(root, "empty-path") }]) {
      const rt = new FirecrackerRuntime({ env, imagesDir: images.imagesDir, kernel: images.kernel });
      await expect(rt.create(instanceSpec(root, log))).rejects.toThrow(hint);
      expect((await rt.check()).some((n) => hint.test(n))).toBe(true);
    }
    const notes = await runtime.check();
    expect(notes.some((n) => /firecracker not found|no guest kernel|has no image/.test(n))).toBe(false);
    const kvm = await probeKvm();
    expect(notes.some((n) => n.startsWith("no hardware KVM"))).toBe(!kvm.ok);
    const noImages = new FirecrackerRuntime({ imagesDir: join(root, "no-images"), env: { ...process.env, LOCALE2B_KERNEL: "" } });
    expect(await noImages.check()).toEqual(expect.arrayContaining([expect.stringMatching(/no guest kernel/), expect.stringMatching(/template 'base' has no image/)]));
    await expect(noImages.create(instanceSpec(root, log))).rejects.toThrow(/no guest kernel found/);
  });

  const canTap = process.getuid?.() === 0 && existsSync("/dev/net/tun");
  it.skipIf(!canTap)("allowInternetAccess: a tap device and network-interfaces eth0; gone while paused, back on resume, removed by kill", async () => {
    const inst = await create({ allowInternetAccess: true });
    const id = inst.sandboxId;
    const tap = `l2b${id.slice(-12)}`;
    const recs = requestsOf(id);
    expectValid(recs);
    expect(recs.map((r) => `${r.method} ${r.path}`)).toEqual([
      "PUT /machine-config",
      "PUT /boot-source",
      "PUT /drives/rootfs",
      "PUT /vsock",
      "PUT /network-interfaces/eth0",
      "PUT /actions",
    ]);
    expect(recs[4]!.body).toMatchObject({ iface_id: "eth0", host_dev_name: tap });
    expect(String(recs[4]!.body!.guest_mac)).toMatch(/^06:00(:[0-9a-f]{2}){4}$/);
    expect(String(recs[1]!.body!.boot_args)).toMatch(/ ip=10\.201\.\d+\.\d+::10\.201\.\d+\.\d+:255\.255\.255\.252::eth0:off:\S+$/);
    expect(existsSync(`/sys/class/net/${tap}`)).toBe(true);
    await inst.pause();
    expect(existsSync(`/sys/class/net/${tap}`)).toBe(false);
    await inst.resume(); // the mock's snapshot/load fails unless the tap exists again
    expect(existsSync(`/sys/class/net/${tap}`)).toBe(true);
    expect(await health(inst.socketPath)).toBe(204);
    await inst.kill();
    expect(existsSync(`/sys/class/net/${tap}`)).toBe(false);
  });

  const canNft = canTap && haveNft();
  it.skipIf(!canNft)(`an egress policy: a tap even without internet, nft rules on it, updated in place, removed by kill${canNft ? "" : " [skipped: needs root, /dev/net/tun and nft]"}`, async () => {
    const inst = await create({ allowInternetAccess: false, egress: { allow: ["192.0.2.7/32"], deny: ["0.0.0.0/0"] } });
    const chain = `sbx_${inst.sandboxId}`;
    expect(existsSync(`/sys/class/net/l2b${inst.sandboxId.slice(-12)}`) && nftChain(chain)).toMatch(/ip daddr 192\.0\.2\.7 accept[\s\S]*ip daddr 0\.0\.0\.0\/0 reject/);
    await inst.updateEgress({ allow: [], deny: ["198.51.100.0/24"] });
    expect(nftChain(chain)).toMatch(/^(?![\s\S]*192\.0\.2\.7)[\s\S]*ip daddr 198\.51\.100\.0\/24 reject/);
    await inst.kill();
    expect(nftChain(chain)).toBeUndefined();
  });
});
