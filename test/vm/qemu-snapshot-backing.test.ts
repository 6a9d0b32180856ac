// A qemu snapshot's overlay names the template build it was taken on as its
// backing file: once that build is gone (rebuilt, pruned) a create from the
// snapshot says so instead of failing in QEMU. Real qemu-img, no VM.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { missingBacking } from "../../control-plane/runtimes/qemu/disk-snapshot.js";
import { findExecutable } from "../../control-plane/host/executables.js";

const qemuImg = findExecutable("qemu-img", process.env.LOCALE2B_QEMU_IMG);
const dir = mkdtempSync(join(tmpdir(), "locale2b-backing-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!qemuImg)(`qemu snapshot overlays and their backing file${qemuImg ? "" : " (skipped: no qemu-img)"}`, () => {
  it("is fine while the backing file exists, and names it once it is gone", () => {
    const base = join(dir, "rootfs.ext4");
    const overlay = join(dir, "disk.qcow2");
    writeFileSync(base, Buffer.alloc(1024 * 1024));
    const r = spawnSync(qemuImg!, ["create", "-q", "-f", "qcow2", "-F", "raw", "-b", base, overlay], { encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    expect(missingBacking(qemuImg!, overlay)).toBeUndefined();
    rmSync(base);
    expect(missingBacking(qemuImg!, overlay)).toMatch(/rootfs\.ext4\) is gone.*take the snapshot again/);
    expect(missingBacking(qemuImg!, join(dir, "nothing.qcow2"))).toMatch(/cannot read the snapshot's disk/);
  });
});
