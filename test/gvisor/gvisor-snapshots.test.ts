// Memory snapshots and fork on gvisor, with the real `e2b` JS SDK: each fork
// and each sandbox made from a snapshot is a runsc restore of one checkpoint
// image on its own copy of the disk, so the processes running at the snapshot
// go on in each of them; each has its own id, access token, hostname and
// network address. A filesystem-only snapshot (memory: false) starts fresh
// processes on the files. Snapshots are listed and deleted as E2B's are.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { setEnv, waitFor } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";
const token = (s: Sandbox) => (s as unknown as { envdAccessToken?: string }).envdAccessToken ?? "";

describe.skipIf(missing !== undefined)(`gvisor: memory snapshots and fork${why}`, { timeout: 300_000 }, () => {
  let cp: TestControlPlane | undefined;
  let restore = () => {};
  let parent: Sandbox;
  let tickerPid = 0;
  beforeAll(async () => {
    cp = await startTestControlPlane({ runtime: gvisorRuntime(), imagesDir: testImagesDir(), warmPool: 0 });
    restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    parent = await Sandbox.create("base", { timeoutMs: 600_000, metadata: { role: "parent" }, envs: { FROM: "parent" } });
    await parent.files.write("/home/user/note.txt", "written before the snapshot");
    // Written aside and renamed: a read (or a snapshot) never sees the file truncated and not yet written (a fork's
    // first read once got "" that way, under CI load).
    tickerPid = (await parent.commands.run("i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done", { background: true, timeoutMs: 0 })).pid;
    await waitFor(async () => Number((await parent.commands.run("cat /tmp/count 2>/dev/null || true")).stdout) > 2, "the parent's counter");
  }, 300_000);
  afterAll(async () => {
    restore();
    await cp?.close();
  });

  /** The counter process runs in `s` and goes on counting. */
  async function counting(s: Sandbox): Promise<number> {
    expect((await s.commands.list()).some((p) => p.pid === tickerPid)).toBe(true);
    const n = Number((await s.commands.run("cat /tmp/count")).stdout);
    await waitFor(async () => Number((await s.commands.run("cat /tmp/count")).stdout) > n, `the counter to go on in ${s.sandboxId}`);
    return n;
  }

  it("a fork of 3: distinct ids, tokens, hostnames and addresses; the parent's processes go on in each; the parent runs on", async () => {
    const forks = await parent.fork({ count: 3, timeoutMs: 300_000 });
    expect(forks.map((f) => (f instanceof Sandbox ? "ok" : String(f)))).toEqual(["ok", "ok", "ok"]);
    const ok = forks as Sandbox[];
    const ids = new Set([parent.sandboxId, ...ok.map((f) => f.sandboxId)]);
    expect(ids.size).toBe(4);
    expect(new Set([token(parent), ...ok.map(token)]).size).toBe(4);
    const addrs = new Set<string>();
    for (const f of ok) {
      expect(await counting(f)).toBeGreaterThan(2);
      const r = await f.commands.run("hostname; hostname -I 2>/dev/null || ip -4 -o addr show eth0; echo $FROM");
      const [host, addr, from] = r.stdout.trim().split("\n");
      expect(host).toBe(f.sandboxId);
      addrs.add(addr!.trim());
      expect(from).toBe("parent");
      expect(await f.files.read("/home/user/note.txt")).toBe("written before the snapshot");
      // Its files are its own: a write in the fork is not seen by the parent.
      await f.files.write("/home/user/mine.txt", f.sandboxId);
      expect((await Sandbox.getInfo(f.sandboxId)).metadata).toEqual({ role: "parent" });
    }
    expect(addrs.size).toBe(3);
    expect(await parent.files.exists("/home/user/mine.txt")).toBe(false);
    await counting(parent);
    for (const f of ok) await f.kill();
  });

  it("a memory snapshot: listed, sandboxes from it go on; filesystem-only starts fresh; deleted, it is gone", async () => {
    const snap = await parent.createSnapshot();
    expect((await Sandbox.listSnapshots({ sandboxId: parent.sandboxId }).nextItems()).map((s) => s.snapshotId)).toContain(snap.snapshotId);
    const child = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 });
    expect(child.sandboxId).not.toBe(parent.sandboxId);
    await counting(child);
    await child.kill();

    const fsOnly = await fetch(`${cp!.url}/sandboxes/${parent.sandboxId}/snapshots`, {
      method: "POST",
      headers: { "X-API-Key": cp!.apiKey, "content-type": "application/json" },
      body: JSON.stringify({ memory: false }),
    }).then((r) => r.json() as Promise<{ snapshotID: string }>);
    const fresh = await Sandbox.create(fsOnly.snapshotID, { timeoutMs: 300_000 });
    expect((await fresh.commands.list()).some((p) => p.pid === tickerPid)).toBe(false);
    expect(await fresh.files.read("/home/user/note.txt")).toBe("written before the snapshot");
    await fresh.kill();

    expect(await Sandbox.deleteSnapshot(snap.snapshotId)).toBe(true);
    await expect(Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })).rejects.toThrow();
    await counting(parent);
  });
});
