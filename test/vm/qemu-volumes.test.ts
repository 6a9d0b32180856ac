// Volumes in QEMU microVMs (virtio-fs: one virtiofsd per volume of a VM,
// runtimes/qemu/virtiofs.ts) through the unmodified JS SDK. One VM with two
// volumes serves most checks (a TCG boot is slow on 2 cores); the server runs
// the process runtime too, so a process sandbox shares a volume with the VM.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Sandbox, Volume } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findKernel } from "../../control-plane/images/layout.js";
import type { PersistedQemuInstance } from "../../control-plane/runtimes/qemu/instance.js";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { findVirtiofsd } from "../../control-plane/runtimes/qemu/virtiofs.js";
import { isRunning } from "../../control-plane/runtimes/process/procfs.js";
import type { TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";
import { endVolumeSuite, sh, startBesideProcess } from "../helpers/volumes.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

/** Why the guest kernel cannot mount virtio-fs (its build's config, beside the vmlinux), if it cannot. */
function kernelWithoutVirtiofs(): string | undefined {
  const kernel = findKernel(process.env, testImagesDir());
  const config = kernel && join(dirname(kernel), "config");
  if (!config || !existsSync(config)) return undefined; // an explicit kernel without its config: the create says
  return /^CONFIG_VIRTIO_FS=y$/m.test(readFileSync(config, "utf8")) ? undefined : `a guest kernel with virtio-fs (${kernel} has none: run scripts/build-kernel.sh)`;
}

const missing = qemuMissing() ?? (findVirtiofsd() ? undefined : "virtiofsd (package qemu-system-common)") ?? (process.getuid?.() === 0 ? undefined : "root") ?? kernelWithoutVirtiofs();
const why = missing ? ` [skipped: ${missing}]` : "";

describe.skipIf(missing !== undefined)(`volumes on the qemu runtime (virtio-fs)${why}`, { timeout: 400_000 }, () => {
  let cp: TestControlPlane;
  let restore: () => void;
  let next: "qemu" | "process" = "qemu";
  let vm: Sandbox;
  let shared: Volume;
  let small: Volume;
  const start = (over: Parameters<typeof startBesideProcess>[2] = {}) => startBesideProcess(new QemuRuntime({ imagesDir: testImagesDir() }), () => next === "process", over);
  const persisted = () => cp.manager.get(vm.sandboxId).runtimeData as unknown as PersistedQemuInstance;

  beforeAll(async () => {
    cp = await start();
    restore = setEnv({ ...cp.sdkEnv, E2B_VOLUME_API_URL: cp.url, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    shared = await Volume.create("qv-shared");
    const res = await fetch(`${cp.url}/volumes`, { method: "POST", headers: { "x-api-key": cp.apiKey, "content-type": "application/json" }, body: JSON.stringify({ name: "qv-small", sizeMB: 32 }) });
    small = await Volume.connect(String(((await res.json()) as { volumeID: string }).volumeID));
    await shared.writeFile("/from-api.txt", "written by the volume API");
    vm = await Sandbox.create("base", { volumeMounts: { "/mnt/data": shared, "/small": small }, timeoutMs: 900_000 });
  }, 400_000);

  afterAll(async () => {
    await endVolumeSuite({ sandboxes: vm ? [vm] : [], cp, restore });
  }, 120_000);

  it("mounts each volume by virtio-fs: written by the API, read and written inside by `user` (owner user), read back by the API", async () => {
    expect((await cp.store.getSandbox(vm.sandboxId))!.runtime).toBe("qemu");
    expect((await sh(vm, "cat /mnt/data/from-api.txt")).stdout).toBe("written by the volume API");
    const w = await sh(vm, "echo from the vm > /mnt/data/from-vm.txt && stat -c '%U:%G %a' /mnt/data /mnt/data/from-api.txt /mnt/data/from-vm.txt");
    expect(w.stdout).toBe("user:user 755\nuser:user 644\nuser:user 644\n");
    expect(await shared.readFile("/from-vm.txt")).toBe("from the vm\n");
    expect(await shared.getInfo("/from-vm.txt")).toMatchObject({ uid: 1000, gid: 1000 });
    await sh(vm, "echo r > /mnt/data/by-root", "root");
    expect(await shared.getInfo("/by-root")).toMatchObject({ uid: 0, gid: 0 });
    const mounts = (await sh(vm, "grep virtiofs /proc/mounts")).stdout;
    expect(mounts).toMatch(/^l2bvol0 \/mnt\/data virtiofs rw,nosuid,nodev/m);
    expect(mounts).toMatch(/^l2bvol1 \/small virtiofs rw,nosuid,nodev/m);
    // One virtiofsd per volume, recorded for adoption after a restart.
    expect(persisted().virtiofsd).toHaveLength(2);
    for (const p of persisted().virtiofsd!) expect(isRunning(p.pid, p.startTime)).toBe(true);
  });

  it("the VM and a process sandbox read each other's writes at once, with the same owners", async () => {
    next = "process";
    const p = await Sandbox.create("base", { volumeMounts: { "/data": shared }, timeoutMs: 300_000 }).finally(() => (next = "qemu"));
    try {
      await sh(vm, "seq 1 1000 > /mnt/data/from-vm-numbers");
      expect((await sh(p, "wc -l < /data/from-vm-numbers && stat -c %U /data/from-vm-numbers")).stdout).toBe("1000\nuser\n");
      await sh(p, "echo from process > /data/from-process");
      expect((await sh(vm, "cat /mnt/data/from-process && stat -c %U /mnt/data/from-process")).stdout).toBe("from process\nuser\n");
    } finally {
      await p.kill();
    }
  });

  it("the size limit is ENOSPC inside the VM", async () => {
    const r = await sh(vm, "dd if=/dev/zero of=/small/big bs=1M count=64 2>&1; echo dd=$?");
    expect(r.stdout).toMatch(/No space left on device/);
    expect(r.stdout).toMatch(/dd=1\n$/);
    await sh(vm, "rm /small/big");
    await small.writeFile("/more", "fits again");
  });

  it("escapes: symlinks resolve in the guest's own root, the API refuses them, no other volume, no device nodes; user cannot unmount", async () => {
    const other = await Volume.create("qv-other");
    await other.writeFile("/secret.txt", "other volume's secret");
    const hostShadow = readFileSync("/etc/shadow", "utf8").split("\n")[0]!;
    expect((await sh(vm, "ln -s / /mnt/data/root && ln -s /etc/shadow /mnt/data/shadow && echo ok", "root")).stdout).toBe("ok\n");
    for (const user of ["user", "root"] as const) {
      const through = await sh(vm, "cat /mnt/data/shadow /mnt/data/root/etc/shadow 2>&1; cat /mnt/data/../../secret.txt 2>&1", user);
      expect(through.stdout, user).not.toContain(hostShadow);
      expect(through.stdout, user).not.toContain("other volume's secret");
      expect((await sh(vm, "cat /mnt/data/root/etc/hostname", user)).stdout, user).toBe((await sh(vm, "cat /etc/hostname", user)).stdout);
      // Only its own tags: another volume's files are nowhere in the VM.
      const see = await sh(vm, "grep -rs \"other volume's secret\" /mnt /small /home /root /tmp /srv /var /opt -l | head -1", user);
      expect(see.stdout, user).toBe("");
    }
    await expect(shared.readFile("/shadow")).rejects.toThrow(/symlink/);
    await expect(shared.readFile("/root/etc/shadow")).rejects.toThrow(/symlink/);
    expect((await sh(vm, "umount /mnt/data")).exitCode).not.toBe(0);
    // virtiofsd runs without CAP_MKNOD: no device node reaches the volume, even from root in the guest.
    expect((await sh(vm, "mknod /mnt/data/mem c 1 1", "root")).exitCode).not.toBe(0);
    // Root in the guest may mount the tag again (the guest's own kernel), and still sees only the volume.
    const again = await sh(vm, "mkdir -p /tmp/again && mount -t virtiofs -o dev,suid l2bvol0 /tmp/again && ls /tmp/again", "root");
    expect(again.stdout).toContain("from-api.txt");
    expect(again.stdout).not.toContain("secret.txt");
    await sh(vm, "umount /tmp/again", "root");
    await Volume.destroy(other.volumeId);
  });

  it("destroying a mounted volume is refused; an in-memory pause and resume keep the mount", async () => {
    const r = await fetch(`${cp.url}/volumes/${shared.volumeId}`, { method: "DELETE", headers: { "x-api-key": cp.apiKey } });
    expect(r.status).toBe(409);
    expect(((await r.json()) as { message: string }).message).toMatch(new RegExp(`volume 'qv-shared' is mounted by sandbox ${vm.sandboxId} .*kill it first`));
    expect(await vm.pause()).toBe(true);
    await shared.writeFile("/while-paused", "written while paused");
    vm = await Sandbox.connect(vm.sandboxId);
    expect((await sh(vm, "cat /mnt/data/while-paused")).stdout).toBe("written while paused");
  });

  it("a server restart re-adopts the VM with its virtiofsds; a kill stops them", async () => {
    const port = Number(new URL(cp.url).port);
    await cp.stopKeepingSandboxes();
    cp = await start({ dataDir: cp.dataDir, apiKey: cp.apiKey, port });
    vm = await Sandbox.connect(vm.sandboxId);
    expect((await sh(vm, "echo after the restart > /mnt/data/after && cat /mnt/data/from-api.txt")).stdout).toBe("written by the volume API");
    expect(await shared.readFile("/after")).toBe("after the restart\n");
    const daemons = persisted().virtiofsd!;
    await vm.kill();
    for (const p of daemons) expect(isRunning(p.pid, p.startTime)).toBe(false);
    expect(await Volume.destroy(shared.volumeId)).toBe(true);
  });
});
