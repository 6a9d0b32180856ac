// Filesystem-only snapshots on the qemu runtime: QEMU copies the VM's qcow2
// overlay while it runs (drive-backup, sync=top); a sandbox from the
// snapshot and a fork boot on their own copies. Real microVMs (TCG here),
// the real JS SDK, REST answers checked against E2B's OpenAPI spec.
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pino } from "pino";
import { applyGuestIdentity } from "../../control-plane/runtimes/guest-identity.js";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { EnvdRpc } from "../../control-plane/transport/envd-rpc.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { CONTROL_PLANE_SPEC, specAvailable, validatorFor } from "../helpers/openapi.js";
import { setEnv } from "../helpers/sdk.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

const missing = qemuMissing();
const VM_TIMEOUT = 600_000;
let cp: TestControlPlane;
let restore = () => {};

beforeAll(async () => {
  if (missing) return;
  cp = await startTestControlPlane({ runtime: new QemuRuntime({ imagesDir: testImagesDir() }) });
  restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
}, VM_TIMEOUT);
afterAll(async () => {
  restore();
  await cp?.close();
}, VM_TIMEOUT);

describe.skipIf(missing !== undefined)(`qemu runtime: filesystem snapshots${missing ? ` [skipped: ${missing}]` : ""}`, { timeout: VM_TIMEOUT }, () => {
  it("snapshot of a running VM, a sandbox from it, a fork, a filesystem-only pause: the files, fresh processes, their own names", async () => {
    const src = await Sandbox.create({ timeoutMs: 3_600_000 });
    await src.files.write("/home/user/vm.txt", "from the vm");
    await src.commands.run("sync");
    await src.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    const res = await fetch(`${cp.url}/sandboxes/${src.sandboxId}/snapshots`, {
      method: "POST",
      headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
      body: JSON.stringify({ name: "vm-snap" }),
    });
    const info = (await res.json()) as { snapshotID: string };
    expect(res.status).toBe(201);
    if (specAvailable(CONTROL_PLANE_SPEC)) expect(validatorFor(CONTROL_PLANE_SPEC, "#/components/schemas/SnapshotInfo")(info)).toBe(true);
    expect(info.snapshotID).toBe("local/vm-snap:default");
    const build = readdirSync(join(cp.dataDir, "snapshots"));
    // The overlay, and the template build it is backed by (kept while the snapshot is: images/image-refs.ts).
    expect(readdirSync(join(cp.dataDir, "snapshots", build[0]!)).sort()).toEqual([".image", "disk.qcow2"]);
    // The source runs on, its process too.
    expect((await src.commands.run("pgrep -x sleep >/dev/null && echo alive")).stdout).toBe("alive\n");

    const child = await Sandbox.create("vm-snap", { timeoutMs: 3_600_000 });
    expect(await child.files.read("/home/user/vm.txt")).toBe("from the vm");
    const out = await child.commands.run("hostname; pgrep -x sleep || echo none");
    expect(out.stdout).toBe(`${child.sandboxId}\nnone\n`);
    // What the control plane does in a guest restored from another's memory (Firecracker forks), run in
    // this real guest (same kernel, image, init and envd): renamed and moved to another /30, as root.
    const { sandbox, endpoint } = await cp.manager.endpoint(child.sandboxId);
    const ipv4 = { device: "eth0", address: "10.201.250.6/30", gateway: "10.201.250.5" };
    await applyGuestIdentity(new EnvdRpc(), { endpoint, token: sandbox.envdAccessToken }, { hostname: "renamed0fork1", ipv4 }, pino({ level: "silent" }));
    const after = await child.commands.run("hostname; cat /etc/hostname; ip -4 -o addr show dev eth0 | wc -l; ip -4 -o addr show dev eth0; ip -4 route show default");
    expect(after.stdout).toMatch(/^renamed0fork1\nrenamed0fork1\n1\n.* inet 10\.201\.250\.6\/30 .*\ndefault via 10\.201\.250\.5 dev eth0/);
    await child.kill();

    const [fork] = await Sandbox.fork(src.sandboxId, { count: 1, timeoutMs: 3_600_000 });
    if (!(fork instanceof Sandbox)) throw fork;
    expect(fork.sandboxId).not.toBe(src.sandboxId);
    expect(await fork.files.read("/home/user/vm.txt")).toBe("from the vm");
    await fork.kill();
    expect(await Sandbox.deleteSnapshot("vm-snap")).toBe(true);

    // The filesystem-only pause: the VM is gone while paused, connect boots it again on its disk.
    await src.commands.run("sync");
    expect(await src.pause({ keepMemory: false })).toBe(true);
    expect(readdirSync(join(cp.dataDir, "paused", src.sandboxId)).sort()).toEqual([".image", "disk.qcow2"]);
    const back = await Sandbox.connect(src.sandboxId, { timeoutMs: 3_600_000 });
    expect(await back.files.read("/home/user/vm.txt")).toBe("from the vm");
    expect((await back.commands.run("pgrep -x sleep || echo none")).stdout).toBe("none\n");
    await src.kill();
    expect(readdirSync(join(cp.dataDir, "snapshots"))).toEqual([]);
  });
});
