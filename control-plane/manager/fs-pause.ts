// E2B's filesystem-only pause (`pause({keepMemory: false})`, `autoPauseMemory:
// false`) and cold-boot resume (`connect` with `memory: false`): the
// sandbox's files are kept aside as a filesystem snapshot under
// `<data dir>/paused/<id>`, its instance is stopped (its memory freed), and
// a resume starts a new instance of the same sandbox (id, token, envs,
// metadata) on those files, with fresh processes. Runtimes that take
// filesystem snapshots (Instance.snapshot, Runtime.createFromSnapshot) can
// do it; on the others it is refused, never turned into a memory pause.
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { carryHold } from "../images/image-refs.js";
import type { Instance } from "../runtimes/runtime.js";
import type { RuntimeSet } from "../runtimes/runtime-set.js";
import type { Transport } from "../transport/transport.js";
import { egressFor } from "./egress.js";
import type { VolumeLeases } from "./options.js";
import { volumeLease } from "./volumes.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { SandboxRecord } from "../domain/sandbox.js";

/** The runtimeData of a sandbox paused to disk: no instance runs. */
const MARK = "pausedToDisk";

/** A live sandbox paused to disk (its files are under paused/<id>). */
export function isPausedToDisk(rec: SandboxRecord | undefined): boolean {
  return rec !== undefined && rec.state !== "killed" && rec.runtimeData?.[MARK] === true;
}

export interface FsPauseDeps {
  dataDir: string;
  runtimes: RuntimeSet;
  transport: Transport;
  log: Logger;
  /** The sandbox's own directory. */
  dir(id: string): string;
  /** Until the new instance's envd answers. */
  waitReady(id: string, inst: Instance): Promise<void>;
  volumes?: VolumeLeases;
}

export function pausedDir(dataDir: string, id: string): string {
  return join(dataDir, "paused", id);
}

/**
 * Keeps the sandbox's files aside and stops its instance. `paused`: it is
 * paused in memory now. Returns the record's new runtimeData. A failure
 * before the files are kept leaves the sandbox as it was.
 */
export async function pauseToDisk(d: FsPauseDeps, rec: SandboxRecord, inst: Instance, paused: boolean): Promise<Record<string, unknown>> {
  if (!inst.snapshotKinds().includes("filesystem")) {
    throw new ControlPlaneError(
      "invalid",
      `sandbox '${rec.id}' runs on the ${rec.runtime} runtime, which cannot pause without memory (filesystem-only) here: pause it keeping its memory`,
    );
  }
  const dest = pausedDir(d.dataDir, rec.id);
  const tmp = `${dest}.tmp`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true, mode: 0o700 });
  try {
    await inst.snapshot(tmp, { kind: "filesystem", paused });
    rmSync(dest, { recursive: true, force: true });
    renameSync(tmp, dest);
    // The kept files depend on the template build the sandbox runs on (a layer over it, or an overlay
    // backed by it): they hold it now, before the sandbox's own directory (its hold) goes.
    carryHold(d.dir(rec.id), dest, d.log);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    rmSync(dest, { recursive: true, force: true });
    throw new ControlPlaneError("internal", `failed to pause sandbox '${rec.id}' to disk: ${(err as Error).message}`);
  }
  d.transport.get(rec.id)?.drop();
  await inst.kill();
  d.transport.forget(rec.id);
  d.log.info({ sandboxId: rec.id }, "sandbox paused to disk (filesystem only)");
  return { [MARK]: true };
}

/** A new instance of the sandbox on its kept files (its envd answering); the caller drops the files once it runs. */
export async function resumeFromDisk(d: FsPauseDeps, rec: SandboxRecord): Promise<Instance> {
  const src = pausedDir(d.dataDir, rec.id);
  if (!existsSync(src)) throw new ControlPlaneError("internal", `sandbox '${rec.id}' was paused to disk, but its files are gone`);
  const runtime = await d.runtimes.byName(rec.runtime);
  const dir = d.dir(rec.id);
  mkdirSync(dir, { recursive: true });
  const log = d.log.child({ sandboxId: rec.id });
  const egress = await egressFor(runtime, rec.network, rec.allowInternetAccess);
  // Its volumes again: they cannot have been destroyed while it was paused.
  const lease = rec.volumeMounts?.length ? await volumeLease(d.volumes, runtime, rec.volumeMounts) : undefined;
  const spec = { sandboxId: rec.id, templateId: rec.boot?.image ?? rec.templateId, cpuCount: rec.cpuCount, memoryMB: rec.memoryMB, diskSizeMB: rec.diskSizeMB, dir, allowInternetAccess: rec.allowInternetAccess, egress, log, ...(lease ? { volumes: lease.bindings } : {}) };
  let inst: Instance;
  try {
    inst = await runtime.createFromSnapshot(spec, { kind: "filesystem", dir: src, runtime: rec.runtime });
  } finally {
    lease?.release();
  }
  try {
    await d.waitReady(rec.id, inst);
  } catch (err) {
    await inst.kill().catch(() => undefined);
    throw err;
  }
  log.info("sandbox started again from disk (fresh processes)");
  return inst;
}

/** Drops what a sandbox paused to disk kept (it was killed). */
export function forgetPausedFiles(dataDir: string, id: string): void {
  rmSync(pausedDir(dataDir, id), { recursive: true, force: true });
}
