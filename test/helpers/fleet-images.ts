// An image cache of a second fleet node's own on one machine (the fleet test
// and `npm run bench -- fleet`): what a second host has after its first start.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * The built-in `base` and envd's runtime hard-linked from the `shared` cache
 * (built images are never changed in place), without its Template SDK builds
 * or any tree a runtime changes (id-shifted copies, holders). The caller
 * removes the returned folder.
 */
export function ownImagesDir(shared: string, prefix = "locale2b-fleet-images-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  try {
    const base = readFileSync(join(shared, "templates", "base.current"), "utf8").trim();
    mkdirSync(join(dir, "templates"));
    for (const sub of ["envd", "init", "runtime", "kernels", "node-hash.json"]) {
      if (existsSync(join(shared, sub))) execFileSync("cp", ["-al", join(shared, sub), join(dir, sub)]);
    }
    execFileSync("cp", ["-al", join(shared, "templates", base), join(dir, "templates", base)]);
    for (const n of readdirSync(join(dir, "templates", base))) {
      if (n.startsWith("rootfs-ids-") || n === ".refs") rmSync(join(dir, "templates", base, n), { recursive: true, force: true });
    }
    writeFileSync(join(dir, "templates", "base.current"), base);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return dir;
}
