// Template builds in use are never pruned: the references sandboxes, pauses to
// disk and snapshots keep to the build they run on (images/image-refs.ts), and
// pruneBuilds, which leaves every build one of them holds. Real folders, no mocks.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { carryHold, heldImage, holdImage, imageHeld, imageHolders, releaseImage, sandboxImage } from "../../control-plane/images/image-refs.js";
import { pruneBuilds } from "../../control-plane/images/template-store.js";

const root = mkdtempSync(join(tmpdir(), "locale2b-imagerefs-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

let n = 0;
/** A fresh images dir. */
function images(): string {
  const d = join(root, `images-${++n}`);
  mkdirSync(join(d, "templates"), { recursive: true });
  return d;
}

/** A complete build `templates/<name>-<hash>` whose manifest is `ageMs` old (pruneBuilds orders by it). */
function build(imagesDir: string, name: string, hash: string, ageMs: number): string {
  const dir = join(imagesDir, "templates", `${name}-${hash}`);
  mkdirSync(join(dir, "rootfs"), { recursive: true });
  const manifest = join(dir, "manifest.json");
  const at = new Date(Date.now() - ageMs);
  writeFileSync(manifest, JSON.stringify({ name, hash, builtAt: at.toISOString(), definition: {}, rootfsBytes: 0, imageBytes: 0 }));
  utimesSync(manifest, at, at);
  return dir;
}

function holder(name: string): string {
  const d = join(root, "holders", `${name}-${n}`);
  mkdirSync(d, { recursive: true });
  return d;
}

const H = 3600_000;

describe("image references", () => {
  it("an image is held while its holder exists and names it", () => {
    const img = images();
    const x = build(img, "base", "1111111111111111", H);
    const y = build(img, "base", "2222222222222222", 0);
    expect(imageHeld(x)).toBe(false);
    const a = holder("sandbox");
    holdImage(x, a);
    expect(heldImage(a)).toBe(x);
    expect(imageHeld(x)).toBe(true);
    expect(imageHolders(x)).toEqual([a]);
    // Started again on a newer build (a resume in the same directory): the old one is free.
    holdImage(y, a);
    expect(imageHeld(x)).toBe(false);
    expect(imageHeld(y)).toBe(true);
    expect(readdirSync(join(x, ".refs"))).toEqual([]); // the stale reference went
    // Removed (killed): nothing held.
    rmSync(a, { recursive: true, force: true });
    expect(imageHeld(y)).toBe(false);
    expect(readdirSync(join(y, ".refs"))).toEqual([]);
  });

  it("a hold follows the files: carried to a copy, kept when the original goes", () => {
    const img = images();
    const x = build(img, "base", "1111111111111111", 0);
    const sandbox = holder("sandbox");
    const snapshot = holder("snapshot");
    holdImage(x, sandbox);
    expect(carryHold(sandbox, snapshot)).toBe(x);
    expect(imageHolders(x).sort()).toEqual([sandbox, snapshot].sort());
    releaseImage(sandbox); // a qemu sandbox's disk removed, its directory not yet
    expect(imageHolders(x)).toEqual([snapshot]);
    rmSync(snapshot, { recursive: true, force: true });
    expect(imageHeld(x)).toBe(false);
    // Nothing to carry from a holder of none (a firecracker sandbox: its disk is a full copy).
    expect(carryHold(holder("copy"), holder("other"))).toBeUndefined();
  });

  it("a reference made through another path to the image cache (a symlink) still holds", () => {
    const img = images();
    const x = build(img, "base", "1111111111111111", 0);
    const link = join(root, `link-${n}`);
    symlinkSync(img, link);
    const a = holder("sandbox");
    holdImage(join(link, "templates", "base-1111111111111111"), a);
    expect(imageHeld(x)).toBe(true);
  });

  it("holding an image that is gone fails, and does not bring back its folder", () => {
    const img = images();
    const gone = join(img, "templates", "base-1111111111111111");
    const a = holder("sandbox");
    expect(() => holdImage(gone, a)).toThrow(/cannot hold the image/);
    expect(existsSync(gone)).toBe(false);
    expect(heldImage(a)).toBeUndefined();
  });

  it("a sandbox from a snapshot runs on the snapshot's build while it is there, else the current one", () => {
    const img = images();
    const old = build(img, "base", "1111111111111111", H);
    const current = build(img, "base", "2222222222222222", 0);
    writeFileSync(join(img, "templates", "base.current"), "base-2222222222222222\n");
    const snap = holder("snapshot");
    expect(sandboxImage("base", img)?.dir).toBe(current);
    expect(sandboxImage("base", img, snap)?.dir).toBe(current); // a snapshot that names none (a step cache entry)
    holdImage(old, snap);
    expect(sandboxImage("base", img, snap)?.dir).toBe(old);
    rmSync(old, { recursive: true, force: true }); // taken before holds existed, its build pruned
    expect(sandboxImage("base", img, snap)?.dir).toBe(current);
  });
});

describe("pruneBuilds", () => {
  it("keeps the newest two, the build asked for and every held build; removes the rest", async () => {
    const img = images();
    const v0 = build(img, "base", "0000000000000000", 5 * H); // held by a holder that is gone
    const v1 = build(img, "base", "1111111111111111", 4 * H); // held by a live sandbox
    const v2 = build(img, "base", "2222222222222222", 3 * H); // held by nothing
    const v3 = build(img, "base", "3333333333333333", 2 * H);
    const v4 = build(img, "base", "4444444444444444", H);
    const other = build(img, "base-python", "5555555555555555", 9 * H); // another template: never base's
    const live = holder("live");
    const dead = holder("dead");
    holdImage(v1, live);
    holdImage(v0, dead);
    rmSync(dead, { recursive: true, force: true });
    const removed = await pruneBuilds(img, "templates", "base", "base-4444444444444444");
    expect(removed.sort()).toEqual(["base-0000000000000000", "base-2222222222222222"]);
    for (const d of [v1, v3, v4, other]) expect(existsSync(d), d).toBe(true);
    for (const d of [v0, v2]) expect(existsSync(d), d).toBe(false);
    // The sandbox goes: its build goes at the next prune.
    rmSync(live, { recursive: true, force: true });
    expect(await pruneBuilds(img, "templates", "base", "base-4444444444444444")).toEqual(["base-1111111111111111"]);
  });

  it("never removes keepId, however old", async () => {
    const img = images();
    const keep = build(img, "base", "1111111111111111", 9 * H);
    build(img, "base", "2222222222222222", 2 * H);
    build(img, "base", "3333333333333333", H);
    const removed = await pruneBuilds(img, "templates", "base", "base-1111111111111111");
    expect(removed).toEqual(["base-2222222222222222"]);
    expect(existsSync(keep)).toBe(true);
  });
});
