// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// Snapshots and forks of Firecracker microVMs (E2B's snapshot API, fork),
// driven against the MOCK Firecracker (test/helpers/mock-firecracker.ts):
// Firecracker cannot run on this project's machines. Every request is
// validated against ../shared/firecracker/firecracker-swagger.yaml. What is
// proven: the API sequence (pause, snapshot, disk copy, resume: one instant),
// what lands in the snapshot store, that a restored VM opens its OWN disk,
// socket and tap (paths relative to its working directory, vsock_override,
// network_overrides) and never its source's, what the guest must be told
// afterwards, and that failures leave nothing behind. Each mock VM proxies
// its vsock to an envd of its own, so a fork's envd is not its source's.
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statSync, writeSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SnapshotUnusableError } from "../../control-plane/runtimes/errors.js";
import { FirecrackerRuntime } from "../../control-plane/runtimes/firecracker/firecracker-runtime.js";
import type { FirecrackerInstance } from "../../control-plane/runtimes/firecracker/instance.js";
import { addresses } from "../../control-plane/runtimes/net/addresses.js";
import { isRunning } from "../../control-plane/runtimes/process/procfs.js";
import type { SnapshotSource } from "../../control-plane/domain/snapshot.js";
import { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { ENVD_PORT } from "../../envd/version.js";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { capturingLogger, cleanUpFirecrackerSuite, fakeImages, health, instanceSpec, MiB, overrideEnv, pidsMentioning } from "../helpers/firecracker-fixture.js";
import { mockFirecrackerBin } from "../helpers/firecracker-mock-bin.js";
import { FirecrackerSpec, findFirecrackerSpec } from "../helpers/firecracker-spec.js";
import { calls, expectValid as expectValidRequests, readRequests, type RecordedRequest } from "../helpers/firecracker-requests.js";

const SPEC_PATH = findFirecrackerSpec();
const haveSpec = existsSync(SPEC_PATH);
if (!haveSpec) process.stderr.write(`firecracker-snapshots.test.ts: skipped, the Firecracker API spec ${SPEC_PATH} was not found\n`);
const canTap = process.getuid?.() === 0 && existsSync("/dev/net/tun");

/** A marker written into a disk image, where the fake template's ext4 has nothing (past its 16 MiB). */
const MARK_AT = 40 * MiB;
function writeMark(disk: string, text: string): void {
  const fd = openSync(disk, "r+");
  writeSync(fd, Buffer.from(text.padEnd(32, ".")), 0, 32, MARK_AT);
  closeSync(fd);
}
function readMark(disk: string): string {
  const fd = openSync(disk, "r");
  const b = Buffer.alloc(32);
  readSync(fd, b, 0, 32, MARK_AT);
  closeSync(fd);
  return b.toString().replace(/\.+$/, "");
}

/** POST /init over a VM's hybrid-vsock socket. */
function postInit(socket: string, body: Record<string, unknown>): Promise<number> {
  const agent = new HybridVsockAgent(socket, ENVD_PORT);
  return new Promise<number>((resolve, reject) => {
    const req = http.request({ agent, method: "POST", path: "/init", headers: { host: `${ENVD_PORT}-sbx`, "content-type": "application/json" } }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  }).finally(() => agent.destroy());
}

describe.skipIf(!haveSpec)(`firecracker snapshots and forks against a mock Firecracker${haveSpec ? "" : " (skipped: no API spec)"}`, () => {
  let root: string;
  let requestLog: string;
  let envdA: TestEnvd;
  let envdB: TestEnvd;
  let spec: FirecrackerSpec;
  let runtime: FirecrackerRuntime;
  const { log } = capturingLogger();
  const live: FirecrackerInstance[] = [];
  let restoreEnv = () => {};

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "l2b-fcs-"));
    requestLog = join(root, "requests.jsonl");
    const images = fakeImages(root);
    spec = new FirecrackerSpec(SPEC_PATH);
    envdA = await startTestEnvd({ listen: ["tcp://127.0.0.1:0"] });
    envdB = await startTestEnvd({ listen: ["tcp://127.0.0.1:0"] });
    restoreEnv = overrideEnv({
      LOCALE2B_FIRECRACKER: mockFirecrackerBin(),
      MOCK_FIRECRACKER_SPEC: SPEC_PATH,
      MOCK_FIRECRACKER_LOG: requestLog,
      MOCK_FIRECRACKER_ENVD: undefined,
      MOCK_FIRECRACKER_FAIL: undefined,
    });
    // The environment is read at each Firecracker start: useEnvd() picks the envd the next VM proxies to.
    runtime = new FirecrackerRuntime({ vmmEnv: process.env, imagesDir: images.imagesDir, kernel: images.kernel, apiTimeoutMs: 5_000 });
  });

  afterAll(async () => {
    restoreEnv();
    await envdA?.close();
    await envdB?.close();
    expect(await cleanUpFirecrackerSuite(root, live)).toEqual([]);
  });

  const useEnvd = (e: TestEnvd) => (process.env.MOCK_FIRECRACKER_ENVD = new URL(e.url).host);
  const requestsOf = (vmId: string) => readRequests(requestLog).filter((r) => r.vmId === vmId);
  const expectValid = (recs: RecordedRequest[]) => expectValidRequests(spec, recs);
  const storeDir = () => mkdtempSync(join(root, "snap-"));
  const track = (inst: FirecrackerInstance) => (live.push(inst), inst);

  async function create(over: Parameters<typeof instanceSpec>[2] = {}): Promise<FirecrackerInstance> {
    return track(await runtime.create(instanceSpec(root, log, over)));
  }
  async function restore(from: SnapshotSource, over: Parameters<typeof instanceSpec>[2] = {}): Promise<FirecrackerInstance> {
    return track(await runtime.createFromSnapshot(instanceSpec(root, log, over), from));
  }

  it("a memory snapshot of a running VM: paused for the snapshot and the disk copy, resumed; a fork restores it on its own disk, socket and envd", async () => {
    useEnvd(envdA);
    const a = await create();
    const aDir = join(root, "sandboxes", a.sandboxId);
    writeMark(join(aDir, "rootfs.ext4"), "before-snapshot");
    const pid = a.pid;
    const seq = requestsOf(a.sandboxId).length;
    const dest = storeDir();
    await a.snapshot(dest, { kind: "memory", paused: false });

    const recs = requestsOf(a.sandboxId).slice(seq);
    expectValid(recs);
    expect(calls(recs)).toEqual(["PATCH /vm 204", "PUT /snapshot/create 204", "PATCH /vm 204"]);
    expect(recs.map((r) => r.body)).toEqual([
      { state: "Paused" },
      { snapshot_type: "Full", snapshot_path: join("capture", "vmstate"), mem_file_path: join("capture", "memory") },
      { state: "Resumed" },
    ]);
    // The source runs on, same process; its capture files moved into the store.
    expect(a.pid).toBe(pid);
    expect(await health(a.socketPath)).toBe(204);
    expect(existsSync(join(aDir, "capture", "vmstate")) || existsSync(join(aDir, "capture", "memory"))).toBe(false);
    expect(statSync(join(dest, "memory")).size).toBe(256 * MiB);
    expect(readMark(join(dest, "rootfs.ext4"))).toBe("before-snapshot");
    expect(JSON.parse(readFileSync(join(dest, "firecracker-snapshot.json"), "utf8"))).toEqual({ v: 1, kind: "memory", cpuCount: 2, memoryMB: 256, network: false });

    // The source writes on after the snapshot; the fork must not see it, nor write to the source's disk.
    writeMark(join(aDir, "rootfs.ext4"), "after-snapshot");
    useEnvd(envdB);
    const b = await restore({ kind: "memory", dir: dest, runtime: "firecracker", sandboxId: a.sandboxId });
    const bDir = join(root, "sandboxes", b.sandboxId);
    const brecs = requestsOf(b.sandboxId);
    expectValid(brecs);
    expect(calls(brecs)).toEqual(["PUT /snapshot/load 204"]); // no boot: the memory is the machine
    expect(brecs[0]!.body).toEqual({
      snapshot_path: join("snapshot", "vmstate"),
      mem_backend: { backend_type: "File", backend_path: join("snapshot", "memory") },
      resume_vm: true,
      vsock_override: { uds_path: "vsock.sock" },
    });
    // The mock says which files the restored VM opened: the fork's own, from its own directory.
    const console = readFileSync(join(bDir, "console.log"), "utf8");
    expect(console).toContain(`block device rootfs: ${join(bDir, "rootfs.ext4")}`);
    expect(console).toContain(`vsock: ${join(bDir, "vsock.sock")}`);
    expect(readMark(join(bDir, "rootfs.ext4"))).toBe("before-snapshot");
    expect(readMark(join(aDir, "rootfs.ext4"))).toBe("after-snapshot");
    writeMark(join(bDir, "rootfs.ext4"), "fork-writes");
    expect(readMark(join(aDir, "rootfs.ext4"))).toBe("after-snapshot");
    // The memory file is linked from the store, not copied.
    expect(statSync(join(bDir, "snapshot", "memory")).ino).toBe(statSync(join(dest, "memory")).ino);
    expect(b.restoredGuest).toEqual({ hostname: b.sandboxId });
    expect(b.socketPath).toBe(join(bDir, "vsock.sock"));
    expect(b.persisted).toMatchObject({ paused: false, pid: b.pid, cpuCount: 2, memoryMB: 256 });

    // Each VM's socket reaches its own envd: the fork's /init does not touch the source's.
    expect(await postInit(b.socketPath, { accessToken: "fork-token" })).toBe(204);
    expect(envdB.context.state.accessToken).toBe("fork-token");
    expect(envdA.context.state.accessToken).toBeUndefined();

    // The fork lives without its source and without the snapshot; its own pause writes its own files.
    await a.kill();
    expect(isRunning(pid)).toBe(false);
    rmSync(dest, { recursive: true, force: true });
    expect(await health(b.socketPath)).toBe(204);
    await b.pause();
    await b.resume();
    expect(await health(b.socketPath)).toBe(204);
    await b.kill();
    for (const f of ["rootfs.ext4", "snapshot", "vsock.sock", "fc.sock"]) expect(existsSync(join(bDir, f)), f).toBe(false);
  });

  it("a paused VM's snapshots are made from its files, without a process; a filesystem-only snapshot boots a fresh VM on a copy of its disk", async () => {
    useEnvd(envdA);
    const a = await create();
    const aDir = join(root, "sandboxes", a.sandboxId);
    writeMark(join(aDir, "rootfs.ext4"), "paused-disk");
    await a.pause();
    const seq = readRequests(requestLog).length;
    const mem = storeDir();
    const fs = storeDir();
    await a.snapshot(mem, { kind: "memory", paused: true });
    await a.snapshot(fs, { kind: "filesystem", paused: true });
    expect(readRequests(requestLog).length).toBe(seq); // no Firecracker was started for it
    expect(a.pid).toBe(0);
    expect(statSync(join(mem, "memory")).ino).toBe(statSync(join(aDir, "snapshot", "memory")).ino);
    expect(readMark(join(mem, "rootfs.ext4"))).toBe("paused-disk");
    expect(existsSync(join(fs, "memory")) || existsSync(join(fs, "vmstate"))).toBe(false);
    expect(JSON.parse(readFileSync(join(fs, "firecracker-snapshot.json"), "utf8"))).toMatchObject({ kind: "filesystem" });
    // The paused VM's next pause replaces its files: the store's link keeps the snapshot intact.
    await a.resume();
    await a.pause();
    expect(statSync(join(mem, "memory")).ino).not.toBe(statSync(join(aDir, "snapshot", "memory")).ino);
    await a.resume();
    expect(await health(a.socketPath)).toBe(204);

    const c = await restore({ kind: "filesystem", dir: fs, runtime: "firecracker", sandboxId: a.sandboxId }, { diskSizeMB: 64 });
    const crecs = requestsOf(c.sandboxId);
    expectValid(crecs);
    expect(calls(crecs)).toEqual(["PUT /machine-config 204", "PUT /boot-source 204", "PUT /drives/rootfs 204", "PUT /vsock 204", "PUT /actions 204"]);
    expect(readMark(join(root, "sandboxes", c.sandboxId, "rootfs.ext4"))).toBe("paused-disk");
    expect(String(crecs[1]!.body!.boot_args)).toContain(`l2b.hostname=${c.sandboxId}`); // booted as itself
    expect(c.restoredGuest).toBeUndefined();
    expect(await health(c.socketPath)).toBe(204);

    // A filesystem snapshot holds no memory; an empty directory holds nothing: clear errors, nothing left.
    const bad = instanceSpec(root, log);
    await expect(runtime.createFromSnapshot(bad, { kind: "memory", dir: fs, runtime: "firecracker" })).rejects.toThrow(SnapshotUnusableError);
    await expect(runtime.createFromSnapshot(bad, { kind: "memory", dir: storeDir(), runtime: "firecracker" })).rejects.toThrow(/not taken by the firecracker runtime/);
    expect(existsSync(join(bad.dir, "rootfs.ext4"))).toBe(false);
    await a.kill();
    await c.kill();
  });

  it("a failed snapshot leaves the VM running and no capture files; a failed restore leaves no process and no files", async () => {
    useEnvd(envdA);
    process.env.MOCK_FIRECRACKER_FAIL = "PUT /snapshot/create"; // read when this VM's Firecracker starts
    const a = await create();
    delete process.env.MOCK_FIRECRACKER_FAIL;
    const aDir = join(root, "sandboxes", a.sandboxId);
    const seq = requestsOf(a.sandboxId).length;
    await expect(a.snapshot(storeDir(), { kind: "memory", paused: false })).rejects.toThrow(/snapshot\/create/);
    const recs = requestsOf(a.sandboxId).slice(seq);
    expect(calls(recs)).toEqual(["PATCH /vm 204", "PUT /snapshot/create 400", "PATCH /vm 204"]);
    expect(recs.at(-1)!.body).toEqual({ state: "Resumed" });
    expect(existsSync(join(aDir, "capture", "vmstate"))).toBe(false);
    expect(await health(a.socketPath)).toBe(204);
    await a.kill();

    const s = await create();
    const dest = storeDir();
    await s.snapshot(dest, { kind: "memory", paused: false });
    process.env.MOCK_FIRECRACKER_FAIL = "PUT /snapshot/load";
    try {
      const spec = instanceSpec(root, log);
      await expect(runtime.createFromSnapshot(spec, { kind: "memory", dir: dest, runtime: "firecracker" })).rejects.toThrow(/snapshot\/load/);
      for (const f of ["rootfs.ext4", "snapshot", "vsock.sock", "fc.sock", "firecracker.json"]) expect(existsSync(join(spec.dir, f)), f).toBe(false);
      expect(pidsMentioning(spec.sandboxId)).toEqual([]);
    } finally {
      delete process.env.MOCK_FIRECRACKER_FAIL;
    }
    await s.kill();
  });

  it.skipIf(!canTap)(`a fork of a VM with a network gets its own tap (network_overrides) and is told its own address${canTap ? "" : " [skipped: needs root and /dev/net/tun]"}`, async () => {
    useEnvd(envdA);
    const a = await create({ allowInternetAccess: true });
    const dest = storeDir();
    await a.snapshot(dest, { kind: "memory", paused: false });
    expect(JSON.parse(readFileSync(join(dest, "firecracker-snapshot.json"), "utf8"))).toMatchObject({ network: true });
    useEnvd(envdB);
    const b = await restore({ kind: "memory", dir: dest, runtime: "firecracker", sandboxId: a.sandboxId }, { allowInternetAccess: true });
    const tap = `l2b${b.sandboxId.slice(-12)}`;
    expect(existsSync(`/sys/class/net/${tap}`)).toBe(true);
    const load = requestsOf(b.sandboxId)[0]!;
    expect(load.body!.network_overrides).toEqual([{ iface_id: "eth0", host_dev_name: tap }]);
    const aAddr = addresses((a.persisted.tap as { index: number }).index);
    const bAddr = addresses((b.persisted.tap as { index: number }).index);
    expect(bAddr.guest).not.toBe(aAddr.guest);
    expect(b.restoredGuest).toEqual({ hostname: b.sandboxId, ipv4: { device: "eth0", address: `${bAddr.guest}/30`, gateway: bAddr.host } });
    expect(await health(b.socketPath)).toBe(204);
    // Its resume after a pause attaches the same tap again.
    await b.pause();
    await b.resume();
    expect(requestsOf(b.sandboxId).at(-1)!.body!.network_overrides).toEqual([{ iface_id: "eth0", host_dev_name: tap }]);
    await b.kill();
    expect(existsSync(`/sys/class/net/${tap}`)).toBe(false);
    await a.kill();
  });
});
