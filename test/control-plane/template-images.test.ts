// The clean-up of template images in a shared image cache: images of builds
// whose server is gone, or that their own server no longer has, and pulled
// base images unused for a week go; another live server's images stay, and so does
// an image a sandbox or snapshot still uses.
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { holdImage } from "../../control-plane/images/image-refs.js";
import { removeImage, removeOrphanImages } from "../../control-plane/templates/image-output.js";

const root = mkdtempSync(join(tmpdir(), "locale2b-tplimg-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function image(imagesDir: string, key: string, definition: Record<string, unknown>, ageMs = 0): string {
  const dir = join(imagesDir, "templates", `${key}-0123456789abcdef`);
  mkdirSync(join(dir, "rootfs"), { recursive: true });
  writeFileSync(join(dir, "manifest.json"), JSON.stringify({ name: key, hash: "0123456789abcdef", builtAt: new Date().toISOString(), definition, rootfsBytes: 0, imageBytes: 0 }));
  writeFileSync(join(imagesDir, "templates", `${key}.current`), `${key}-0123456789abcdef\n`);
  if (ageMs) utimesSync(dir, new Date(Date.now() - ageMs), new Date(Date.now() - ageMs));
  return dir;
}

function server(name: string): string {
  const d = join(root, name);
  mkdirSync(d, { recursive: true });
  writeFileSync(join(d, "locale2b.db"), "");
  return d;
}

describe("template image clean-up", () => {
  it("removes what no live server owns, and nothing of another live server", async () => {
    const images = join(root, "images");
    const me = server("me");
    const other = server("other");
    const gone = join(root, "gone"); // a deleted data dir
    const keep = [
      image(images, "@11111111-1111-4111-8111-111111111111", { owner: me, buildId: "mine-known" }),
      image(images, "@22222222-2222-4222-8222-222222222222", { owner: other, buildId: "theirs-unknown-to-me" }),
      image(images, "@oci-aaaaaaaaaaaaaaaa", { from: "python:3.12" }, 3600_000),
      image(images, "@44444444-4444-4444-8444-444444444444", {}, 60_000), // made before images named their server: left an hour
      image(images, "base", {}),
    ];
    const drop = [
      image(images, "@33333333-3333-4333-8333-333333333333", { owner: gone, buildId: "x" }),
      image(images, "@55555555-5555-4555-8555-555555555555", { owner: me, buildId: "mine-deleted" }),
      image(images, "@oci-bbbbbbbbbbbbbbbb", { from: "debian" }, 8 * 24 * 3600_000),
      image(images, "@66666666-6666-4666-8666-666666666666", {}, 2 * 3600_000),
    ];
    const removed = await removeOrphanImages(images, me, (id) => id === "mine-known");
    expect(removed.sort()).toEqual(["@33333333-3333-4333-8333-333333333333", "@55555555-5555-4555-8555-555555555555", "@66666666-6666-4666-8666-666666666666", "@oci-bbbbbbbbbbbbbbbb"]);
    for (const d of keep) expect(existsSync(d), d).toBe(true);
    for (const d of drop) expect(existsSync(d), d).toBe(false);
    expect(existsSync(join(images, "templates", "@33333333-3333-4333-8333-333333333333.current"))).toBe(false);
  });

  it("keeps an image a sandbox or snapshot still uses (no new sandbox starts on it), and removes it once unused", async () => {
    const images = join(root, "images-held");
    const me = server("me-held");
    const key = "@77777777-7777-4777-8777-777777777777";
    const dir = image(images, key, { owner: me, buildId: "mine-deleted" });
    const sandbox = join(root, "held-by", "sandbox");
    holdImage(dir, sandbox);
    expect(await removeImage(images, key)).toEqual([`${key}-0123456789abcdef`]);
    expect(existsSync(join(images, "templates", `${key}.current`))).toBe(false);
    expect(existsSync(dir)).toBe(true);
    expect(await removeOrphanImages(images, me, () => false)).toEqual([]);
    expect(existsSync(dir)).toBe(true);
    rmSync(sandbox, { recursive: true, force: true }); // killed
    expect(await removeOrphanImages(images, me, () => false)).toEqual([key]);
    expect(existsSync(dir)).toBe(false);
  });
});
