// Volumes in a gVisor sandbox: each volume's host mount (control-plane/volumes)
// is a bind mount in the OCI bundle. runsc's gofer serves files with their host
// ids unshifted (`user` of a gVisor sandbox is host uid 1000), while a volume's
// files belong to the process runtime's shifted ids (user = base + 1000), so
// the bundle's source is an id-mapped bind of the volume (volumes/native/idmap-bind.c:
// base.. reads as 0..; nodev, nosuid), made under the sandbox's directory only
// while runsc starts (run or restore) the sandbox: the gofer keeps its own copy
// in its mount namespace, and nothing of it is left on the host's side after.
// Every sandbox, of either runtime, sees the same files with the same owners.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync } from "node:fs";
import { join } from "node:path";
import { runCommand } from "../../host/commands.js";
import { findExecutable } from "../../host/executables.js";
import { idmapHelper, shiftArgs } from "../../volumes/idmap-bind.js";

/** A volume as the bundle names it: its id-mapped source under the sandbox's dir, and its path inside. */
export interface BundleVolume {
  source: string;
  destination: string;
}

/** What a gVisor instance keeps of its volumes (for a restore after a pause). */
export interface GvisorVolume {
  hostPath: string;
  path: string;
}

const volumesDir = (sandboxDir: string): string => join(sandboxDir, "volumes");

/** The bundle's mounts for `volumes` (sources numbered in order, under `<sandbox dir>/volumes/`). */
export function bundleVolumes(sandboxDir: string, volumes: GvisorVolume[]): BundleVolume[] {
  return volumes.map((v, i) => ({ source: join(volumesDir(sandboxDir), String(i)), destination: v.path }));
}

/** Mount points under `dir` (from /proc/self/mountinfo), deepest first. */
function mountsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const field = line.split(" ")[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (field && field.startsWith(`${dir}/`)) out.push(field);
  }
  return out.sort((a, b) => b.length - a.length);
}

/** Makes the id-mapped sources of `volumes` for a runsc run or restore; unbindVolumes removes them. */
export async function bindVolumes(imagesDir: string, sandboxDir: string, volumes: GvisorVolume[]): Promise<void> {
  if (volumes.length === 0) return;
  await unbindVolumes(sandboxDir);
  const helper = await idmapHelper(imagesDir);
  const args = shiftArgs();
  for (const [i, b] of bundleVolumes(sandboxDir, volumes).entries()) {
    if (!existsSync(volumes[i]!.hostPath)) throw new Error(`volume at ${volumes[i]!.path}: its host mount ${volumes[i]!.hostPath} is missing`);
    mkdirSync(b.source, { recursive: true, mode: 0o700 });
    args.push(volumes[i]!.hostPath, b.source);
  }
  try {
    await runCommand(helper, args);
  } catch (err) {
    await unbindVolumes(sandboxDir);
    const why = ((err as { stderr?: string }).stderr || (err as Error).message).trim().replace(/^l2b-idmap-bind: /, "");
    throw new Error(`cannot mount volume${volumes.length > 1 ? "s" : ""} at ${volumes.map((v) => v.path).join(", ")}: ${why}`);
  }
}

/** Unmounts the sandbox's id-mapped sources (the running sandbox keeps its own) and removes their directories. */
export async function unbindVolumes(sandboxDir: string): Promise<void> {
  const dir = volumesDir(sandboxDir);
  if (!existsSync(dir)) return;
  const umount = findExecutable("umount") ?? "umount";
  for (const m of mountsUnder(dir)) await runCommand(umount, ["-l", m]);
  const left = mountsUnder(dir);
  if (left.length) throw new Error(`cannot unmount ${left.join(", ")}`);
  // Only empty directories are removed (rmdir): never anything of a volume.
  for (const name of readdirSync(dir)) rmdirSync(join(dir, name));
  rmdirSync(dir);
}

