// Volumes a VM mounts itself (qemu: virtio-fs tags, runtimes/qemu/virtiofs.ts):
// the control plane runs `mount -t virtiofs` as root through envd once the
// guest answers, before the sandbox is handed out (a create, and a start again
// from disk). nodev and nosuid as on every runtime; root in the guest owns the
// guest's kernel, so what it does with the mount stays in the VM (virtiofsd
// serves nothing outside the volume).
import type { GuestVolume } from "../runtimes/runtime.js";
import type { EnvdRpc, EnvdTarget } from "../transport/envd-rpc.js";
import { runScript } from "../transport/envd-script.js";

const SCRIPT = `set -e
while [ $# -ge 2 ]; do
  mkdir -p -- "$2"
  mount -t virtiofs -o nodev,nosuid -- "$1" "$2"
  shift 2
done`;

/** Mounts `volumes` inside; throws saying which and why (a kernel without virtio-fs says what to rebuild). */
export async function mountGuestVolumes(rpc: EnvdRpc, target: EnvdTarget, volumes: GuestVolume[]): Promise<void> {
  if (volumes.length === 0) return;
  const r = await runScript(rpc, target, "root", "volumes", SCRIPT, volumes.flatMap((v) => [v.tag, v.path]));
  if (r.code === 0) return;
  const hint = /unknown filesystem type/.test(r.stderr) ? " (the guest kernel has no virtio-fs: rebuild it with scripts/build-kernel.sh, whose config has CONFIG_VIRTIO_FS=y)" : "";
  throw new Error(`cannot mount volume${volumes.length > 1 ? "s" : ""} at ${volumes.map((v) => v.path).join(", ")} in the VM: ${r.stderr || `exit ${r.code}`}${hint}`);
}
