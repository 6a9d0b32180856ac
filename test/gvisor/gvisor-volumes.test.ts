// Volumes on the gvisor runtime through the unmodified JS SDK (Volume,
// Sandbox.create({ volumeMounts })): one server whose default runtime is
// gvisor and which runs the process runtime too (the test switches the
// template's runtime between creates), so a gVisor and a process sandbox
// mount one volume at once. Owners (`user` writes, both runtimes see it as
// user), the size limit, escapes as user and root (symlinks, `..`, mount
// tricks, devices, another volume), destroy refused while mounted, pause to
// disk and resume, and a server restart.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, Volume } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestControlPlane } from "../helpers/control-plane.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { setEnv } from "../helpers/sdk.js";
import { endVolumeSuite, sh, startBesideProcess } from "../helpers/volumes.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";

describe.skipIf(missing !== undefined)(`volumes on the gvisor runtime${why}`, { timeout: 300_000 }, () => {
  let cp: TestControlPlane;
  let restore: () => void;
  /** The runtime the next create's template runs on: gvisor (the server's default) or process. */
  let next: "gvisor" | "process" = "gvisor";
  const sandboxes: Sandbox[] = [];
  const start = (over: Parameters<typeof startBesideProcess>[2] = {}) => startBesideProcess(gvisorRuntime(), () => next === "process", over);

  const create = async (mounts: Record<string, Volume | string>, on: "gvisor" | "process" = "gvisor") => {
    next = on;
    try {
      const sbx = await Sandbox.create("base", { volumeMounts: mounts, timeoutMs: 600_000 });
      sandboxes.push(sbx);
      expect((await cp.store.getSandbox(sbx.sandboxId))!.runtime).toBe(on);
      return sbx;
    } finally {
      next = "gvisor";
    }
  };

  beforeAll(async () => {
    cp = await start();
    restore = setEnv({ ...cp.sdkEnv, E2B_VOLUME_API_URL: cp.url, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  }, 120_000);

  afterAll(async () => {
    await endVolumeSuite({ sandboxes, cp, restore });
  }, 120_000);

  it("written by the API, read and written inside by `user` (owner user), read back by the API; no host-side mount is left", async () => {
    const vol = await Volume.create("gv-basic");
    await vol.writeFile("/from-api.txt", "written by the volume API");
    const sbx = await create({ "/mnt/data": vol });
    expect((await sh(sbx, "cat /mnt/data/from-api.txt")).stdout).toBe("written by the volume API");
    const w = await sh(sbx, "echo from gvisor > /mnt/data/from-sandbox.txt && mkdir /mnt/data/d && stat -c '%U:%G %a' /mnt/data /mnt/data/from-api.txt /mnt/data/from-sandbox.txt /mnt/data/d");
    expect(w.stdout).toBe("user:user 755\nuser:user 644\nuser:user 644\nuser:user 755\n");
    expect(await vol.readFile("/from-sandbox.txt")).toBe("from gvisor\n");
    expect(await vol.getInfo("/from-sandbox.txt")).toMatchObject({ uid: 1000, gid: 1000 });
    // Root inside writes as sandbox root (uid 0 through the API, as on the process runtime).
    await sh(sbx, "echo r > /mnt/data/by-root", "root");
    expect(await vol.getInfo("/by-root")).toMatchObject({ uid: 0, gid: 0 });
    // The id-mapped bind runsc started from is gone on the host: the gofer keeps its own.
    const dir = join(cp.dataDir, "sandboxes", sbx.sandboxId);
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(`${dir}/volumes`);
    expect(readdirSync(dir)).not.toContain("volumes");
    expect((await sbx.getInfo()).volumeMounts).toEqual([{ name: "gv-basic", path: "/mnt/data" }]);
  });

  it("a gVisor and a process sandbox mount one volume at once and read each other's writes with the same owners", async () => {
    const vol = await Volume.create("gv-shared");
    const [g, p] = [await create({ "/data": vol }), await create({ "/data": vol }, "process")];
    await sh(g, "seq 1 1000 > /data/from-gvisor && sync");
    expect((await sh(p, "wc -l < /data/from-gvisor && stat -c %U /data/from-gvisor")).stdout).toBe("1000\nuser\n");
    await sh(p, "echo from process > /data/from-process");
    expect((await sh(g, "cat /data/from-process && stat -c %U /data/from-process")).stdout).toBe("from process\nuser\n");
    // Appends from both while both run.
    await sh(g, "for i in 1 2 3; do echo g$i >> /data/log; done");
    await sh(p, "for i in 1 2 3; do echo p$i >> /data/log; done");
    expect((await sh(g, "cat /data/log")).stdout).toBe("g1\ng2\ng3\np1\np2\np3\n");
    expect((await sh(p, "cat /data/log")).stdout).toBe("g1\ng2\ng3\np1\np2\np3\n");
  });

  it("the size limit is ENOSPC inside; the sandbox's own disk is untouched", async () => {
    const res = await fetch(`${cp.url}/volumes`, { method: "POST", headers: { "x-api-key": cp.apiKey, "content-type": "application/json" }, body: JSON.stringify({ name: "gv-small", sizeMB: 32 }) });
    expect(res.status).toBe(201);
    const vol = await Volume.connect(String(((await res.json()) as { volumeID: string }).volumeID));
    const sbx = await create({ "/small": vol });
    const r = await sh(sbx, "dd if=/dev/zero of=/small/big bs=1M count=64 2>&1; echo dd=$?");
    expect(r.stdout).toMatch(/No space left on device/);
    expect(r.stdout).toMatch(/dd=1\n$/);
    expect((await sh(sbx, "dd if=/dev/zero of=/tmp/ok bs=1M count=40 2>&1 && echo fine")).stdout).toMatch(/fine/);
    await sh(sbx, "rm /small/big");
    await vol.writeFile("/more", "fits again");
  });

  it("escapes as user and root: symlinks resolve in the sandbox's own root, no `..` out, no other volume, no mount tricks, no devices or setuid", async () => {
    const mine = await Volume.create("gv-mine");
    const other = await Volume.create("gv-other");
    await other.writeFile("/secret.txt", "other volume's secret");
    const sbx = await create({ "/mnt/mine": mine });
    const hostShadow = readFileSync("/etc/shadow", "utf8");
    const plant = await sh(sbx, "ln -s / /mnt/mine/root && ln -s /etc/shadow /mnt/mine/shadow && ln -s ../../.. /mnt/mine/up && echo ok", "root");
    expect(plant.stdout).toBe("ok\n");
    for (const user of ["user", "root"] as const) {
      const through = await sh(sbx, "cat /mnt/mine/shadow /mnt/mine/root/etc/shadow 2>&1; ls /mnt/mine/up/", user);
      // Inside: the template's own files (root reads the image's shadow, user is refused), never the host's.
      expect(through.stdout, user).not.toContain(hostShadow.split("\n")[0]!);
      expect((await sh(sbx, "cat /mnt/mine/root/etc/hostname", user)).stdout.trim(), user).toBe(sbx.sandboxId);
      const see = await sh(sbx, `grep -rs "other volume's secret" /mnt /home /root /tmp /srv /var /opt /run -l | head -1; ls ${join(cp.dataDir, "volumes")} 2>&1 | head -1`, user);
      expect(see.stdout, user).not.toMatch(/secret\.txt/);
      expect(see.stdout, user).toMatch(/No such file or directory/);
      expect((await sh(sbx, "cat /mnt/mine/../../secret.txt", user)).exitCode, user).not.toBe(0);
      expect((await sh(sbx, "cat /proc/self/mountinfo", user)).stdout, user).not.toContain(other.volumeId);
    }
    // Through the API the links are refused, never followed to the host's files.
    await expect(mine.readFile("/shadow")).rejects.toThrow(/symlink/);
    await expect(mine.readFile("/root/etc/shadow")).rejects.toThrow(/symlink/);
    await expect(mine.list("/up")).rejects.toThrow(/symlink/);
    // Root inside has no CAP_SYS_ADMIN: no unmount, remount with devices or setuid, bind or new mount.
    for (const cmd of ["umount /mnt/mine", "umount -l /mnt/mine", "mount -o remount,rw,dev,suid /mnt/mine", "mkdir -p /tmp/b && mount --bind /mnt/mine /tmp/b", "mount -t tmpfs t /mnt/mine"]) {
      expect((await sh(sbx, cmd, "root")).exitCode, cmd).not.toBe(0);
    }
    // No device node in the volume (the mount is nodev; gVisor's gofer makes no devices).
    const dev = await sh(sbx, "mknod /mnt/mine/mem c 1 1 2>&1; ls /mnt/mine/mem 2>&1", "root");
    expect(dev.stdout).toMatch(/mknod: \/mnt\/mine\/mem: Operation not permitted\n.*No such file/);
    // A setuid binary in the volume runs with the caller's ids.
    await sh(sbx, "cp /usr/bin/id /mnt/mine/id && chmod 4755 /mnt/mine/id", "root");
    expect((await sh(sbx, "/mnt/mine/id -u")).stdout).toBe("1000\n");
    expect((await sh(sbx, "echo still > /mnt/mine/still && cat /mnt/mine/still")).stdout).toBe("still\n");
  });

  it("destroying a mounted volume is refused with what to do; after the kill it goes", async () => {
    const vol = await Volume.create("gv-busy");
    const sbx = await create({ "/busy": vol });
    const r = await fetch(`${cp.url}/volumes/${vol.volumeId}`, { method: "DELETE", headers: { "x-api-key": cp.apiKey } });
    expect(r.status).toBe(409);
    expect(((await r.json()) as { message: string }).message).toMatch(new RegExp(`volume 'gv-busy' is mounted by sandbox ${sbx.sandboxId} .*kill it first`));
    await sbx.kill();
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
  });

  it("pause to disk (runsc checkpoint) and resume: the volume is mounted again, with what was written while paused", async () => {
    const vol = await Volume.create("gv-pause");
    const sbx = await create({ "/p": vol });
    await sh(sbx, "echo before > /p/before");
    expect(await sbx.pause()).toBe(true);
    await vol.writeFile("/while-paused", "written while paused");
    const again = await Sandbox.connect(sbx.sandboxId);
    expect((await sh(again, "cat /p/before /p/while-paused && echo after > /p/after")).stdout).toBe("before\nwritten while paused");
    expect(await vol.readFile("/after")).toBe("after\n");
    // A memory snapshot would restore its volumes' mounts into another bundle: refused, saying what works.
    const snap = await fetch(`${cp.url}/sandboxes/${sbx.sandboxId}/snapshots`, { method: "POST", headers: { "x-api-key": cp.apiKey, "content-type": "application/json" }, body: JSON.stringify({ memory: true }) });
    expect(snap.status).toBe(400);
    expect(((await snap.json()) as { message: string }).message).toMatch(/cannot take memory snapshots \(it takes: filesystem\)/);
    // Nor does a sandbox from another's memory snapshot get volumes: its checkpoint has no such mounts.
    const plain = await create({});
    const memory = await plain.createSnapshot();
    await expect(Sandbox.create(memory.snapshotId, { volumeMounts: { "/p": vol } })).rejects.toThrow(/cannot mount volumes on gvisor \(its checkpoint has no such mounts\)/);
  });

  it("a server restart re-adopts a gVisor sandbox with its volume mounted", async () => {
    const vol = await Volume.create("gv-durable");
    const sbx = await create({ "/keep": vol });
    await sh(sbx, "echo before the restart > /keep/note");
    const port = Number(new URL(cp.url).port);
    await cp.stopKeepingSandboxes();
    cp = await start({ dataDir: cp.dataDir, apiKey: cp.apiKey, port });
    const again = await Sandbox.connect(sbx.sandboxId);
    expect((await sh(again, "cat /keep/note && echo after > /keep/after")).stdout).toBe("before the restart\n");
    expect(await vol.readFile("/after")).toBe("after\n");
    const r = await fetch(`${cp.url}/volumes/${vol.volumeId}`, { method: "DELETE", headers: { "x-api-key": cp.apiKey } });
    expect(r.status).toBe(409);
  });
});
