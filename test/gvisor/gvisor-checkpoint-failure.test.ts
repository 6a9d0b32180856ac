// A pause to disk whose checkpoint fails must not lose the sandbox: the disk
// its image goes to is full (the data dir on a small tmpfs, filled up), so
// runsc checkpoint fails for real. The pause answers an error that says why;
// the sandbox runs on, answers at once, its processes untouched; once there is
// room, the next pause works. Root inside forging the init's ack file gains
// nothing either.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { setEnv, waitFor } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";

describe.skipIf(missing !== undefined)(`gvisor: a failed checkpoint leaves the sandbox running${why}`, { timeout: 300_000 }, () => {
  let mnt = "";
  let cp: TestControlPlane | undefined;
  let restore = () => {};
  beforeAll(async () => {
    // Only this test's files on the small disk: no warm-start image built there in the background.
    process.env.LOCALE2B_GVISOR_WARM_START = "0";
    mnt = mkdtempSync(join(tmpdir(), "l2b-gv-full-"));
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=160m", "tmpfs", mnt]);
    cp = await startTestControlPlane({ dataDir: join(mnt, "data"), runtime: gvisorRuntime(), imagesDir: testImagesDir(), warmPool: 0 });
    restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  }, 300_000);
  afterAll(async () => {
    delete process.env.LOCALE2B_GVISOR_WARM_START;
    restore();
    await cp?.close();
    if (mnt) {
      execFileSync("umount", ["-l", mnt]);
      rmSync(mnt, { recursive: true, force: true });
    }
  });

  it("a full disk fails the checkpoint: the pause says why, the sandbox runs on; with room the pause works", async () => {
    const sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
    const ticker = await sbx.commands.run("i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done", { background: true, timeoutMs: 0 });
    // Root inside forges the init's ack file: the host does not take it for a quiesce (it removes it and waits for the init's own).
    await sbx.commands.run("touch /run/locale2b-host/envd.sock.quiesced", { user: "root" });
    // Fill the disk the checkpoint image would go to, leaving a few MiB: enough for the store's own
    // writes (SQLite lives in the same data dir), far from enough for the image (tens of MiB).
    const filler = join(mnt, "filler");
    try {
      execFileSync("dd", ["if=/dev/zero", `of=${filler}`, "bs=1M"], { stdio: "ignore" });
    } catch {
      // ENOSPC: full, as wanted
    }
    rmSync(filler, { force: true });
    execFileSync("dd", ["if=/dev/zero", `of=${filler}`, "bs=1M", `count=${freeMiB(mnt) - 8}`], { stdio: "ignore" });

    const res = await fetch(`${cp!.url}/sandboxes/${sbx.sandboxId}/pause`, { method: "POST", headers: { "X-API-Key": cp!.apiKey } });
    expect(res.status).toBe(500);
    expect(((await res.json()) as { message: string }).message).toMatch(/failed to pause sandbox.*checkpoint/);
    expect((await Sandbox.getInfo(sbx.sandboxId)).state).toBe("running");
    const n = Number((await sbx.commands.run("cat /tmp/count")).stdout);
    await waitFor(async () => Number((await sbx.commands.run("cat /tmp/count")).stdout) > n, "the counter to go on after the failed pause");
    expect((await sbx.commands.list()).some((p) => p.pid === ticker.pid)).toBe(true);

    rmSync(filler, { force: true });
    expect(await sbx.pause()).toBe(true);
    const again = await Sandbox.connect(sbx.sandboxId);
    expect((await again.commands.list()).some((p) => p.pid === ticker.pid)).toBe(true);
    await again.kill();
  });
});

function freeMiB(dir: string): number {
  const out = execFileSync("df", ["-m", "--output=avail", dir], { encoding: "utf8" });
  return Number(out.trim().split("\n").pop());
}

