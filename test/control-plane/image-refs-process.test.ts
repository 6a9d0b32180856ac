// A template build a process-runtime sandbox runs on is not pruned when the
// template is rebuilt twice (a host upgrade: every new envd is a new build),
// and a snapshot of it keeps that build after the sandbox goes: real
// sandboxes on a real `base` build. The build is a hard-linked copy of the
// base template in a private image cache (the shared one is never changed),
// with two newer builds beside it that have a manifest and no files: a
// sandbox that ran on one of those could not start a shell.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { carryHold, heldImage, imageHeld } from "../../control-plane/images/image-refs.js";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { pruneBuilds, setCurrent } from "../../control-plane/images/template-store.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { attach, dataDir, isRoot, log, newId, useProcessRuntime, type Sandbox } from "../helpers/process-runtime.js";
import { testImagesDir } from "../helpers/vm.js";

useProcessRuntime(import.meta.url);

const shared = findTemplateImage("base", testImagesDir());
const skip = !isRoot ? "needs root (sandbox mode)" : !shared ? `the base template is not built in ${testImagesDir()} (locale2b template build base)` : undefined;

const H = 3600_000;
const OLD = "base-1111111111111111";
const NEWER = "base-2222222222222222";
const NEWEST = "base-3333333333333333";
const UNUSED = "base-0000000000000000";

let images = "";
let runtime: ProcessRuntime;
const dirOf = (id: string) => join(images, "templates", id);

/** A build whose manifest (what pruneBuilds orders by) is `ageMs` old; only a manifest unless it exists already. */
function fakeBuild(id: string, ageMs: number): void {
  const dir = dirOf(id);
  mkdirSync(join(dir, "rootfs"), { recursive: true });
  const manifest = join(dir, "manifest.json");
  const at = new Date(Date.now() - ageMs);
  // A new file (never written through a hard link into the shared cache).
  rmSync(manifest, { force: true });
  const base = shared!.manifest;
  writeFileSync(manifest, JSON.stringify({ ...base, hash: id.slice(-16), builtAt: at.toISOString() }));
  utimesSync(manifest, at, at);
}

async function start(fromSnapshot?: string): Promise<Sandbox> {
  const id = newId();
  const dir = join(dataDir, "sandboxes", id);
  mkdirSync(dir, { recursive: true });
  const spec = { sandboxId: id, templateId: "base", cpuCount: 1, memoryMB: 256, diskSizeMB: 512, dir, allowInternetAccess: false, log };
  const inst = fromSnapshot ? await runtime.createFromSnapshot(spec, { kind: "filesystem", dir: fromSnapshot, runtime: "process" }) : await runtime.create(spec);
  return attach(id, dir, inst);
}

/** As the manager does: the instance stopped, its directory removed. */
async function kill(s: Sandbox): Promise<void> {
  await s.inst.kill();
  rmSync(s.dir, { recursive: true, force: true });
}

beforeAll(() => {
  if (skip) return;
  // Beside the data dir (/var/tmp: the same file system as the shared cache, so links work).
  images = mkdtempSync(join(dataDir, "..", "locale2b-imagerefs-images-"));
  const old = dirOf(OLD);
  mkdirSync(old, { recursive: true });
  // The files (and the id-shifted copy the runtime makes on first use) as hard links: read-only to sandboxes.
  for (const name of readdirSync(shared!.dir).filter((n) => n === "rootfs" || n.startsWith("rootfs-ids-"))) {
    try {
      execFileSync("cp", ["-al", "--", join(shared!.dir, name), join(old, name)]);
    } catch {
      rmSync(join(old, name), { recursive: true, force: true });
      execFileSync("cp", ["-a", "--", join(shared!.dir, name), join(old, name)]);
    }
  }
  fakeBuild(OLD, 3 * H);
  writeFileSync(join(images, "templates", "base.current"), `${OLD}\n`);
  runtime = new ProcessRuntime({ imagesDir: images });
});

afterAll(() => {
  if (images) rmSync(images, { recursive: true, force: true });
});

describe.skipIf(skip !== undefined)(`template builds in use on the process runtime${skip ? ` (skipped: ${skip})` : ""}`, () => {
  let first: Sandbox;
  const snapshot = () => join(dataDir, "snapshots", "s1");

  it("a sandbox keeps running on its build after two newer builds and a prune", async () => {
    first = await start();
    expect(heldImage(first.dir)).toBe(dirOf(OLD));
    await first.sh("echo before > /home/user/mark");
    // Two rebuilds (a new envd each): the sandbox's build is now the third newest.
    fakeBuild(UNUSED, 4 * H);
    fakeBuild(NEWER, 2 * H);
    fakeBuild(NEWEST, H);
    await setCurrent(images, "base", NEWEST);
    const removed = await pruneBuilds(images, "templates", "base", NEWEST);
    // Its whole root is still there: binaries, libraries, the interpreter, its own writes.
    expect(await first.sh("cat /home/user/mark; cat /etc/debian_version >/dev/null && echo debian; python3 -c 'print(6*7)'; ls /usr/bin | wc -l")).toMatch(/^before\ndebian\n42\n\d{3,}$/);
    expect(removed).toEqual([UNUSED]);
    expect(existsSync(join(dirOf(OLD), "rootfs", "usr", "bin", "cat"))).toBe(true);
  });

  it("a snapshot keeps the build after the sandbox goes, and a sandbox from it runs on that build", async () => {
    await first.sh("echo kept > /home/user/mark");
    mkdirSync(snapshot(), { recursive: true });
    // As SnapshotService.capture does: the snapshot's files, then the hold carried from the sandbox's directory.
    await first.inst.snapshot(snapshot(), { kind: "filesystem", paused: false });
    expect(carryHold(first.dir, snapshot())).toBe(dirOf(OLD));
    await kill(first);
    expect(await pruneBuilds(images, "templates", "base", NEWEST)).toEqual([]);
    expect(imageHeld(dirOf(OLD))).toBe(true);
    // The current build has no files: only the snapshot's own build can run this.
    const child = await start(snapshot());
    expect(heldImage(child.dir)).toBe(dirOf(OLD));
    expect(await child.sh("cat /home/user/mark; id -un")).toBe("kept\nuser");
    await kill(child);
    rmSync(snapshot(), { recursive: true, force: true });
    // Nothing uses it any more: the next prune takes it.
    expect(await pruneBuilds(images, "templates", "base", NEWEST)).toEqual([OLD]);
    expect(readFileSync(join(images, "templates", "base.current"), "utf8").trim()).toBe(NEWEST);
  });
});
