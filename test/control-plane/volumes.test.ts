// Volumes through the unmodified JS SDK (e2b 2.51: Volume and
// Sandbox.create({ volumeMounts })) against a real server on the process
// runtime: the REST API, the volume file API, mounts in sandboxes (several at
// once), persistence across kill, pause and a server restart, the size limit,
// bad input, and escapes from inside a sandbox (as `user` and as root) and
// through symlinks a sandbox plants for a later API call.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, Volume, VolumeError, VolumePathNotFoundError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";
import { endVolumeSuite, sh } from "../helpers/volumes.js";

const isRoot = process.getuid?.() === 0;
if (!isRoot) console.warn("volumes.test.ts: skipped: volumes need root (loop-mounted ext4 images)");

/** The raw REST answer (for statuses and messages the SDK wraps). */
async function rest(cp: TestControlPlane, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${cp.url}${path}`, {
    method,
    headers: { "x-api-key": cp.apiKey, "content-type": "application/json", ...headers },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

describe.skipIf(!isRoot)("volumes (process runtime, e2b JS SDK)", { timeout: 180_000 }, () => {
  let cp: TestControlPlane;
  let restore: () => void;
  const sandboxes: Sandbox[] = [];

  const create = async (mounts: Record<string, Volume | string>) => {
    const sbx = await Sandbox.create("base", { volumeMounts: mounts, timeoutMs: 300_000 });
    sandboxes.push(sbx);
    return sbx;
  };

  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 0 });
    restore = setEnv({ ...cp.sdkEnv, E2B_VOLUME_API_URL: cp.url, E2B_DEBUG: undefined });
  }, 120_000);

  afterAll(async () => {
    await endVolumeSuite({ sandboxes, cp, restore });
  }, 120_000);

  it("creates, lists, gets and destroys volumes; bad names and unknown ids are refused with what to do", async () => {
    const vol = await Volume.create("api-basics");
    expect(vol.volumeId).toMatch(/^vol_[a-z0-9]+$/);
    expect(vol.token).toMatch(/^[0-9a-f]{64}$/);
    expect((await Volume.list()).map((v) => v.name)).toContain("api-basics");
    const info = await Volume.getInfo(vol.volumeId);
    expect(info).toMatchObject({ volumeId: vol.volumeId, name: "api-basics", token: vol.token });
    const again = await Volume.connect(vol.volumeId);
    expect(again.token).toBe(vol.token);

    for (const bad of ["", "has space", "dots.not.ok", "slash/no", "x".repeat(65)]) {
      const r = await rest(cp, "POST", "/volumes", { name: bad });
      expect(r.status, bad).toBe(400);
      expect(String(r.json.message)).toMatch(/name/);
    }
    const dup = await rest(cp, "POST", "/volumes", { name: "api-basics" });
    expect(dup.status).toBe(409);
    expect(dup.json.message).toMatch(/a volume named 'api-basics' exists/);
    expect((await rest(cp, "POST", "/volumes", { name: "tiny", sizeMB: 1 })).status).toBe(400);
    expect((await rest(cp, "GET", "/volumes/vol_nope")).status).toBe(404);
    await expect(Volume.getInfo("vol_nope")).rejects.toThrow(/not found/);
    // No API key: 401; the file API wants the volume's token, not a key.
    expect((await fetch(`${cp.url}/volumes`)).status).toBe(401);
    const wrong = await fetch(`${cp.url}/volumecontent/${vol.volumeId}/path?path=/`, { headers: { authorization: "Bearer 00" } });
    expect(wrong.status).toBe(401);
    expect(((await wrong.json()) as { message: string }).message).toMatch(/invalid token/);
    const none = await fetch(`${cp.url}/volumecontent/${vol.volumeId}/path?path=/`, { headers: { "x-api-key": cp.apiKey } });
    expect(none.status).toBe(401);

    expect(await Volume.destroy(vol.volumeId)).toBe(true);
    expect(await Volume.destroy(vol.volumeId)).toBe(false);
    expect(existsSync(join(cp.dataDir, "volumes", vol.volumeId))).toBe(false);
  });

  it("the file API: write, read, list, makeDir, getInfo, exists, updateMetadata, remove", async () => {
    const vol = await Volume.create("file-api");
    const w = await vol.writeFile("/docs/readme.txt", "hello volume");
    expect(w).toMatchObject({ name: "readme.txt", type: "file", path: "/docs/readme.txt", size: 12, uid: 1000, gid: 1000, mode: 0o644 });
    expect(await vol.readFile("/docs/readme.txt")).toBe("hello volume");
    expect(Buffer.from(await vol.readFile("docs/readme.txt", { format: "bytes" })).toString()).toBe("hello volume");
    const d = await vol.makeDir("/a/b/c", { force: true, mode: 0o750 });
    expect(d).toMatchObject({ type: "directory", path: "/a/b/c", mode: 0o750 });
    await expect(vol.makeDir("/x/y")).rejects.toBeInstanceOf(VolumePathNotFoundError);
    expect((await vol.list("/")).map((e) => `${e.type}:${e.name}`)).toEqual(["directory:a", "directory:docs"]);
    expect((await vol.list("/", { depth: 3 })).map((e) => e.path)).toEqual(["/a", "/a/b", "/a/b/c", "/docs", "/docs/readme.txt"]);
    expect(await vol.exists("/docs/readme.txt")).toBe(true);
    expect(await vol.exists("/docs/nope")).toBe(false);
    const m = await vol.updateMetadata("/docs/readme.txt", { uid: 0, gid: 0, mode: 0o600 });
    expect(m).toMatchObject({ uid: 0, gid: 0, mode: 0o600 });
    await vol.remove("/a");
    await expect(vol.getInfo("/a/b")).rejects.toBeInstanceOf(VolumePathNotFoundError);
    await expect(vol.remove("/a")).rejects.toBeInstanceOf(VolumePathNotFoundError);
    await expect(vol.readFile("/docs")).rejects.toThrow(/is a directory/);
  });

  it("bad paths: '..', NUL, the root itself; bad ids, modes and depths: 400 saying why", async () => {
    const vol = await Volume.create("bad-paths");
    const call = (method: string, route: string, query: string) =>
      fetch(`${cp.url}/volumecontent/${vol.volumeId}/${route}?${query}`, { method, headers: { authorization: `Bearer ${vol.token}` } });
    for (const [method, route, query, message] of [
      ["GET", "file", "path=../../etc/passwd", /contains '\.\.'/],
      ["GET", "file", "path=/a/../../etc/passwd", /contains '\.\.'/],
      ["PUT", "file", "path=/x%00y", /NUL/],
      ["GET", "path", "", /'path' is required/],
      ["DELETE", "path", "path=/", /the volume's root/],
      ["PUT", "file", "path=/f&uid=70000", /uid 70000/],
      ["PUT", "file", "path=/f&mode=99999", /mode 99999/],
      ["GET", "dir", "path=/&depth=0", /depth 0/],
    ] as const) {
      const res = await call(method, route, query);
      expect(res.status, `${method} ${route}?${query}`).toBe(400);
      expect(((await res.json()) as { message: string }).message).toMatch(message);
    }
    await expect(vol.readFile("../x")).rejects.toThrow(/'\.\.'/);
  });

  it("mounts a volume in a sandbox: written by the API, read and written inside by `user`, read back by the API", async () => {
    const vol = await Volume.create("shared-1");
    await vol.writeFile("/from-api.txt", "written by the volume API");
    const sbx = await create({ "/mnt/data": vol });
    expect((await sh(sbx, "cat /mnt/data/from-api.txt")).stdout).toBe("written by the volume API");
    expect((await sh(sbx, "echo from the sandbox > /mnt/data/from-sandbox.txt && stat -c '%U %a' /mnt/data /mnt/data/from-sandbox.txt")).stdout).toBe("user 755\nuser 644\n");
    expect(await vol.readFile("/from-sandbox.txt")).toBe("from the sandbox\n");
    expect((await sbx.getInfo()).volumeMounts).toEqual([{ name: "shared-1", path: "/mnt/data" }]);
    // Mounted by name too (the SDK sends names).
    const byName = await create({ "/srv/vol": "shared-1" });
    expect((await sh(byName, "cat /srv/vol/from-sandbox.txt")).stdout).toBe("from the sandbox\n");
  });

  it("several sandboxes mount one volume at once: a write in one is read in the other while both run", async () => {
    const vol = await Volume.create("shared-2");
    const [a, b] = await Promise.all([create({ "/data": vol }), create({ "/data": vol })]);
    await sh(a, "seq 1 1000 > /data/numbers && sync");
    expect((await sh(b, "wc -l < /data/numbers")).stdout.trim()).toBe("1000");
    // A process writes in b while a reads as it grows.
    const writer = await b.commands.run("for i in $(seq 1 20); do echo line$i >> /data/log; sleep 0.05; done", { background: true });
    await writer.wait();
    expect((await sh(a, "tail -1 /data/log")).stdout).toBe("line20\n");
  });

  it("destroying a mounted volume is refused (running or paused) with what to do; after the kill it goes", async () => {
    const vol = await Volume.create("busy");
    const sbx = await create({ "/busy": vol });
    const r = await rest(cp, "DELETE", `/volumes/${vol.volumeId}`);
    expect(r.status).toBe(409);
    expect(r.json.message).toMatch(new RegExp(`volume 'busy' is mounted by sandbox ${sbx.sandboxId} .*kill it first`));
    await expect(Volume.destroy(vol.volumeId)).rejects.toBeInstanceOf(VolumeError);
    await sbx.pause();
    expect((await rest(cp, "DELETE", `/volumes/${vol.volumeId}`)).status).toBe(409);
    const resumed = await Sandbox.connect(sbx.sandboxId);
    expect((await sh(resumed, "echo after resume > /busy/r && cat /busy/r")).stdout).toBe("after resume\n");
    await resumed.kill();
    expect(await Volume.destroy(vol.volumeId)).toBe(true);
  });

  it("a filesystem-only pause keeps the mount: the resumed sandbox has its volume at the same path", async () => {
    const vol = await Volume.create("fs-pause");
    const sbx = await create({ "/fsp": vol });
    await sh(sbx, "echo kept > /fsp/k && echo own > /home/user/own");
    await sbx.pause({ keepMemory: false });
    await vol.writeFile("/while-paused", "written while paused");
    const again = await Sandbox.connect(sbx.sandboxId);
    expect((await sh(again, "cat /fsp/k /fsp/while-paused /home/user/own")).stdout).toBe("kept\nwritten while pausedown\n");
    expect((await again.getInfo()).volumeMounts).toEqual([{ name: "fs-pause", path: "/fsp" }]);
  });

  it("volumeMounts that cannot be: unknown volume, bad paths, overlapping mounts: 400 saying why", async () => {
    const vol = await Volume.create("mount-checks");
    const post = (volumeMounts: unknown) => rest(cp, "POST", "/v2/sandboxes", { templateID: "base", volumeMounts });
    for (const [mounts, message] of [
      [[{ name: "no-such-volume", path: "/mnt/x" }], /no volume named 'no-such-volume': create it first/],
      [[{ name: "mount-checks", path: "relative/dir" }], /must be absolute/],
      [[{ name: "mount-checks", path: "/" }], /cannot be mounted at '\/'/],
      [[{ name: "mount-checks", path: "/proc/x" }], /under \/proc/],
      [[{ name: "mount-checks", path: "/mnt/../etc" }], /'\.' or '\.\.'/],
      [[{ name: "mount-checks", path: "/a" }, { name: "mount-checks", path: "/a/b" }], /overlaps another mount/],
      [[{ name: "mount-checks" }], /'path' .* required/],
      ["not-a-list", /volumeMounts/],
    ] as const) {
      const r = await post(mounts);
      expect(r.status, JSON.stringify(mounts)).toBe(400);
      expect(r.json.message).toMatch(message);
    }
    expect(vol.name).toBe("mount-checks");
  });

  it("a volume's size limit: ENOSPC inside the sandbox, 507 through the API", async () => {
    const res = await rest(cp, "POST", "/volumes", { name: "small", sizeMB: 32 });
    expect(res.status).toBe(201);
    const vol = await Volume.connect(String(res.json.volumeID));
    const sbx = await create({ "/small": vol });
    const r = await sh(sbx, "dd if=/dev/zero of=/small/big bs=1M count=64 2>&1; echo dd=$?");
    expect(r.stdout).toMatch(/No space left on device/);
    expect(r.stdout).toMatch(/dd=1\n$/);
    // The sandbox's own disk is untouched by it.
    expect((await sh(sbx, "dd if=/dev/zero of=/tmp/ok bs=1M count=40 2>&1 && echo fine")).stdout).toMatch(/fine/);
    const put = await fetch(`${cp.url}/volumecontent/${vol.volumeId}/file?path=/more`, {
      method: "PUT",
      headers: { authorization: `Bearer ${vol.token}`, "content-type": "application/octet-stream" },
      body: Buffer.alloc(8 * 1024 * 1024, 1),
    });
    expect(put.status).toBe(507);
    expect(((await put.json()) as { message: string }).message).toMatch(/volume 'small' is full/);
    // Nothing half-written is left: no '/more', no temporary file; a file the failed write would have replaced is intact.
    await sh(sbx, "rm /small/big; echo 'the old content' > /small/keep && dd if=/dev/zero of=/small/filler bs=1M count=26 2>/dev/null; true");
    const over = await fetch(`${cp.url}/volumecontent/${vol.volumeId}/file?path=/keep`, {
      method: "PUT",
      headers: { authorization: `Bearer ${vol.token}`, "content-type": "application/octet-stream" },
      body: Buffer.alloc(8 * 1024 * 1024, 1),
    });
    expect(over.status).toBe(507);
    expect((await sh(sbx, "cat /small/keep; ls -a /small")).stdout).toBe("the old content\n.\n..\nfiller\nkeep\n");
    expect(await vol.exists("/more")).toBe(false);
    await sh(sbx, "rm /small/filler");
    await vol.writeFile("/more", "fits again");
  });

  it("escapes from inside, as user and as root: no other volume, no host path, no unmount, remount or mount, no hard link out", async () => {
    const mine = await Volume.create("mine");
    const other = await Volume.create("other");
    await other.writeFile("/secret.txt", "other volume's secret");
    const sbx = await create({ "/mnt/mine": mine });
    const hostFiles = join(cp.dataDir, "volumes", other.volumeId, "files");
    expect(readFileSync(join(hostFiles, "secret.txt"), "utf8")).toBe("other volume's secret");
    for (const user of ["user", "root"] as const) {
      const see = await sh(sbx, `grep -rs "other volume's secret" /mnt /home /root /tmp /srv /var /opt /run -l | head -1; ls ${hostFiles} ${cp.dataDir} 2>&1 | head -2`, user);
      expect(see.stdout, user).not.toMatch(/secret\.txt\n/);
      expect(see.stdout, user).toMatch(/No such file or directory/);
      expect((await sh(sbx, "ls -a /mnt/mine/.. && cat /mnt/mine/../../secret.txt", user)).exitCode, user).not.toBe(0);
      const mounts = (await sh(sbx, "cat /proc/self/mountinfo", user)).stdout;
      expect(mounts, user).not.toContain(other.volumeId);
      expect(mounts.split("\n").filter((l) => l.includes(" /mnt/mine ")).length, user).toBe(1);
    }
    // Root inside has no mount rights: no umount, remount, bind, new mount or new namespace that could give one.
    for (const cmd of [
      "umount /mnt/mine",
      "umount -l /mnt/mine",
      "mount -o remount,rw,suid /mnt/mine",
      "mkdir -p /tmp/b && mount --bind /mnt/mine /tmp/b",
      "mount -t ext4 /dev/vda /tmp/b",
      "mount -t tmpfs t /mnt/mine",
      "unshare -Urm sh -c 'mount --bind / /tmp/b'",
      "unshare -m sh -c 'umount /mnt/mine'",
      "ls /dev/loop0 /dev/loop-control",
    ]) {
      const r = await sh(sbx, cmd, "root");
      expect(r.exitCode, cmd).not.toBe(0);
    }
    expect((await sh(sbx, "echo still > /mnt/mine/still && cat /mnt/mine/still")).stdout).toBe("still\n");
    // A hard link cannot bring a file of the sandbox's root (or the host's) into the volume.
    expect((await sh(sbx, "ln /etc/passwd /mnt/mine/pw", "root")).stderr).toMatch(/Invalid cross-device link/);
  });

  it("a symlink planted in a volume from inside a sandbox never makes a later API call go outside it", async () => {
    const vol = await Volume.create("planted");
    const sbx = await create({ "/v": vol });
    const plant = await sh(sbx, "mkdir -p /v/d && ln -s / /v/root && ln -s /etc/hostname /v/host && ln -s ../.. /v/d/up && ln -s /v/d /v/dirlink && echo inside > /v/d/f && mkfifo /v/fifo && echo ok", "root");
    expect(plant.stdout).toBe("ok\n");
    const bad = /symlink/;
    await expect(vol.readFile("/root/etc/hostname")).rejects.toThrow(bad);
    await expect(vol.readFile("/host")).rejects.toThrow(bad);
    await expect(vol.readFile("/d/up/etc/passwd")).rejects.toThrow(bad);
    await expect(vol.list("/root")).rejects.toThrow(bad);
    await expect(vol.writeFile("/root/tmp/escaped", "x")).rejects.toThrow(bad);
    await expect(vol.writeFile("/host", "overwrite?")).rejects.toThrow(bad);
    await expect(vol.makeDir("/root/tmp/escaped-dir", { force: true })).rejects.toThrow(bad);
    await expect(vol.updateMetadata("/host", { mode: 0o777 })).rejects.toThrow(bad);
    expect(existsSync("/tmp/escaped")).toBe(false);
    expect(existsSync("/tmp/escaped-dir")).toBe(false);
    // Reading through a directory symlink is refused too; its own entry is shown, not followed.
    await expect(vol.readFile("/dirlink/f")).rejects.toThrow(bad);
    expect(await vol.getInfo("/root")).toMatchObject({ type: "symlink", target: "/" });
    expect(await vol.readFile("/d/f")).toBe("inside\n");
    // A FIFO is not read (it would block the server): refused at once.
    await expect(vol.readFile("/fifo")).rejects.toThrow(/not a regular file/);
    // Removing a link removes the link, not what it points to; a directory goes with what is in it, links not followed.
    await vol.remove("/root");
    await vol.remove("/d");
    expect(existsSync("/etc/hostname")).toBe(true);
    expect((await vol.list("/")).map((e) => e.name).sort()).toEqual(["dirlink", "fifo", "host"]);
  });

  it("a volume survives its sandboxes, a kill and a server restart; a sandbox running across the restart keeps its mount", async () => {
    const vol = await Volume.create("durable");
    const first = await create({ "/keep": vol });
    await sh(first, "echo before the restart > /keep/note && sync");
    await first.kill();
    const survivor = await create({ "/keep": vol });
    const port = Number(new URL(cp.url).port);
    await cp.stopKeepingSandboxes();
    cp = await startTestControlPlane({ dataDir: cp.dataDir, apiKey: cp.apiKey, port, warmPool: 0 });
    expect(await vol.readFile("/note")).toBe("before the restart\n");
    const again = await Sandbox.connect(survivor.sandboxId);
    expect((await sh(again, "cat /keep/note && echo after > /keep/after")).stdout).toBe("before the restart\n");
    expect(await vol.readFile("/after")).toBe("after\n");
    expect((await rest(cp, "DELETE", `/volumes/${vol.volumeId}`)).status).toBe(409);
    const fresh = await create({ "/again": "durable" });
    expect((await sh(fresh, "cat /again/after")).stdout).toBe("after\n");
  });
});
