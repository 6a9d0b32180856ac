// Where a volume's files live on the host: an ext4 image of its size
// (`<data dir>/volumes/<id>/disk.img`, sparse: host disk is taken only as files
// are written), loop-mounted at `<data dir>/volumes/<id>/files` in the
// server's mount namespace (nodev, nosuid) for as long as the volume exists.
// Sandboxes get a bind of that mount; the file API works on it. A file system
// of its own per volume is what makes the size limit an ENOSPC for every writer
// (a sandbox's process or the API), on any host file system, and keeps hard
// links and `..` from ever reaching past the volume.
import { existsSync, readFileSync } from "node:fs";
import { mkdir, rm, rmdir } from "node:fs/promises";
import { join } from "node:path";
import { runCommand } from "../host/commands.js";
import { findExecutable } from "../host/executables.js";

export interface VolumeLayout {
  dir: string;
  image: string;
  /** The mount point: the volume's root directory while mounted. */
  files: string;
}

export function volumeLayout(dataDir: string, id: string): VolumeLayout {
  const dir = join(dataDir, "volumes", id);
  return { dir, image: join(dir, "disk.img"), files: join(dir, "files") };
}

function why(err: unknown): string {
  return (((err as { stderr?: string }).stderr || (err as Error).message) ?? "").trim();
}

/** Mount points as /proc/self/mountinfo has them (octal escapes undone). */
function mountPoints(): Set<string> {
  const out = new Set<string>();
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const field = line.split(" ")[4];
    if (field) out.add(field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
  }
  return out;
}

export function isMounted(l: VolumeLayout): boolean {
  return mountPoints().has(l.files);
}

/**
 * A new volume: its ext4 image of `sizeMB` with the root directory owned by
 * `owner` (host ids: `user` of the sandboxes), mounted. No reserved blocks,
 * no lost+found: all of it is the volume's.
 */
export async function createVolumeDisk(l: VolumeLayout, sizeMB: number, owner: { uid: number; gid: number }): Promise<void> {
  const mkfs = findExecutable("mkfs.ext4");
  if (!mkfs) throw new Error("mkfs.ext4 is missing: install e2fsprogs (a volume is an ext4 image)");
  await mkdir(l.files, { recursive: true, mode: 0o700 });
  const size = `${Math.floor(sizeMB)}M`;
  try {
    await runCommand(mkfs, ["-q", "-F", "-m", "0", "-E", `root_owner=${owner.uid}:${owner.gid},lazy_itable_init=1,lazy_journal_init=1,nodiscard`, l.image, size]);
  } catch (err) {
    await rm(l.dir, { recursive: true, force: true });
    throw new Error(`cannot make the volume's disk (mkfs.ext4 ${size}): ${why(err)}`);
  }
  await mountVolumeDisk(l);
  await rmdir(join(l.files, "lost+found")).catch(() => undefined);
}

/** Mounts the volume's image at its mount point unless it is (a restarted server finds it mounted). */
export async function mountVolumeDisk(l: VolumeLayout): Promise<void> {
  if (isMounted(l)) return;
  if (!existsSync(l.image)) throw new Error(`the volume's disk ${l.image} is missing`);
  await mkdir(l.files, { recursive: true, mode: 0o700 });
  try {
    await runCommand(findExecutable("mount") ?? "mount", ["-t", "ext4", "-o", "loop,nodev,nosuid,noatime,discard", l.image, l.files]);
  } catch (err) {
    throw new Error(`cannot mount the volume's disk ${l.image}: ${why(err)}`);
  }
}

/** Unmounts (lazily when something still holds it) and removes everything of the volume. */
export async function removeVolumeDisk(l: VolumeLayout): Promise<void> {
  if (isMounted(l)) {
    const umount = findExecutable("umount") ?? "umount";
    try {
      await runCommand(umount, [l.files]);
    } catch {
      await runCommand(umount, ["-l", l.files]).catch((err: unknown) => {
        throw new Error(`cannot unmount the volume at ${l.files}: ${why(err)}`);
      });
    }
  }
  await rm(l.dir, { recursive: true, force: true });
}
