// What a host needs to run Firecracker microVMs: the binary (and, optionally,
// the jailer) and hardware KVM. Probing only, through the host checks that
// `locale2b doctor` uses too; nothing here changes the host.
import { accelFor } from "../../host/accel.js";
import { findExecutable } from "../../host/executables.js";
import { setting } from "../../settings.js";

/** Where a user learns how to install Firecracker, a guest kernel and images. */
export const SETUP_HINT = "see docs/microvms.md / scripts/setup-host";

export type Found = { path: string } | { missing: string };

/** The firecracker binary: `$LOCALE2B_FIRECRACKER`, else `firecracker` on PATH (or where setup-host installs). */
export function findFirecracker(env: NodeJS.ProcessEnv = process.env): Found {
  const explicit = setting("LOCALE2B_FIRECRACKER", env);
  const path = findExecutable("firecracker", explicit, env);
  if (path) return { path };
  if (explicit) return { missing: `firecracker not found: LOCALE2B_FIRECRACKER=${explicit} is not an executable file (${SETUP_HINT})` };
  return { missing: `firecracker not found: no 'firecracker' on PATH and LOCALE2B_FIRECRACKER is unset (${SETUP_HINT})` };
}

/** The jailer binary: `$LOCALE2B_JAILER`, else `jailer` on PATH. */
export function findJailer(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return findExecutable("jailer", setting("LOCALE2B_JAILER", env), env);
}


export interface KvmProbe {
  ok: boolean;
  /** Why not, in words a user can act on. */
  reason?: string;
}

/**
 * Hardware KVM: /dev/kvm opens read-write, the CPU has vmx or svm, and it is
 * not PVM (kvm_pvm, which cannot run a normal guest kernel: ../shared/vm-notes.md).
 */
export async function probeKvm(): Promise<KvmProbe> {
  const a = await accelFor();
  return a.accel === "kvm" ? { ok: true } : { ok: false, reason: a.reason };
}
