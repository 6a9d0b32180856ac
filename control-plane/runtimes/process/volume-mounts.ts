// Volumes in a process sandbox: each volume's host mount (control-plane/volumes)
// bound at its path inside, moved into the running sandbox's mount namespace by
// a small static helper (native/mount-into.c: open_tree, setns, move_mount),
// right after the launcher reports the sandbox's first process and before the
// sandbox is handed out. The helper walks the target inside the sandbox's own
// root without following symlinks, and the mount belongs to the host's user
// namespace: root in the sandbox can neither unmount nor remount it.
import { join } from "node:path";
import type { VolumeBinding } from "../../domain/volume.js";
import { runCommand } from "../../host/commands.js";
import { ensureCompiled } from "../../images/guest-init.js";
import { packageRoot } from "../paths.js";

/** The helper for the current sources, compiled on first use into `<imagesDir>/host-tools/mount-into/<hash>/`. */
export function mountHelper(imagesDir: string): Promise<string> {
  return ensureCompiled({
    sourceDir: join(packageRoot(), "control-plane", "runtimes", "process", "native"),
    cacheDir: join(imagesDir, "host-tools", "mount-into"),
    binaryName: "l2b-mount-into",
    what: "the volume mount helper",
  });
}

/** Mounts `volumes` in the sandbox whose first process is host pid `initPid`; directories it makes belong to `owner` (host ids). */
export async function mountVolumes(imagesDir: string, initPid: number, volumes: VolumeBinding[], owner: { uid: number; gid: number }): Promise<void> {
  if (volumes.length === 0) return;
  const helper = await mountHelper(imagesDir);
  const args = ["--pid", String(initPid), "--owner", `${owner.uid}:${owner.gid}`];
  for (const v of volumes) args.push(v.hostPath, v.path);
  try {
    await runCommand(helper, args);
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr || (err as Error).message).trim().replace(/^l2b-mount-into: /, "");
    throw new Error(`cannot mount volume${volumes.length > 1 ? "s" : ""} ${volumes.map((v) => `'${v.name}' at ${v.path}`).join(", ")}: ${why}`);
  }
}
