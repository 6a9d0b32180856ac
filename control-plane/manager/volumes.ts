import type { VolumeMount } from "../domain/volume.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { Runtime } from "../runtimes/runtime.js";
import type { VolumeLeases } from "./options.js";

type Lease = Awaited<ReturnType<VolumeLeases["acquire"]>>;

/**
 * A sandbox's volumes held for its start (checked, as host paths), refused
 * (`invalid`) when this server has no volumes or its runtime cannot mount them.
 */
export async function volumeLease(volumes: VolumeLeases | undefined, runtime: Runtime, mounts: VolumeMount[]): Promise<Lease> {
  if (!volumes) throw new ControlPlaneError("invalid", "volumeMounts: volumes are not available on this server");
  const why = await runtime.volumesUnsupported();
  if (why) throw new ControlPlaneError("invalid", `volumeMounts: ${why}`);
  return volumes.acquire(mounts);
}
