// The template step cache (control-plane/templates/step-cache.ts): entries, and what a prune may remove.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { StepCache } from "../../control-plane/templates/step-cache.js";

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function cacheDir(): string {
  const d = mkdtempSync(join(tmpdir(), "locale2b-step-cache-"));
  dirs.push(d);
  return d;
}

const state = { envs: { A: "1" }, user: "user", workdir: "/home/user", args: {} };

describe("StepCache", () => {
  it("keeps a committed step for its runtime only, and an entry without files points at the one that has them", () => {
    const cache = new StepCache(cacheDir(), 1 << 30);
    const s = cache.staging("k1");
    writeFileSync(join(s.dir, "rootfs.tar"), "files");
    s.commit(state, "process");
    expect(cache.get("k1", "process")).toEqual({ state, filesDir: join(cache.dir, "k1") });
    expect(cache.get("k1", "gvisor")).toBeUndefined();
    cache.putState("k2", { ...state, envs: { A: "2" } }, "k1", "process");
    expect(cache.get("k2", "process")).toEqual({ state: { ...state, envs: { A: "2" } }, filesDir: join(cache.dir, "k1") });
    expect(cache.get("nope", "process")).toBeUndefined();
  });

  it("a prune removes the staging folders of servers that are gone, never those of a live server sharing the cache", async () => {
    const cache = new StepCache(cacheDir(), 1 << 30);
    // Another server, alive: a process of ours stands in for it (its pid names the folder, as a server's would).
    const other = spawn("sleep", ["60"], { stdio: "ignore" });
    const dead = spawn("true", { stdio: "ignore" });
    await new Promise((r) => dead.once("exit", r));
    const live = join(cache.dir, `.tmp-k9-${other.pid}-${Date.now()}`);
    const gone = join(cache.dir, `.tmp-k8-${dead.pid}-${Date.now()}`);
    const mine = cache.staging("k7").dir;
    for (const d of [live, gone]) mkdirSync(d);
    try {
      const removed = await cache.prune();
      expect(removed).toEqual([gone.split("/").at(-1)]);
      expect(existsSync(live)).toBe(true);
      expect(existsSync(mine)).toBe(true);
      expect(existsSync(gone)).toBe(false);
    } finally {
      other.kill();
    }
  });
});
