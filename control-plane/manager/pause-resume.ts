// Pausing and resuming a sandbox, under its lock (the manager takes it):
// in memory, through the instance's own pause (its endpoint's pause policy
// first: keep, drop or quiet its connections), or to disk (E2B's
// filesystem-only pause, fs-pause.ts); resuming from either, envd's
// settings pushed again and a VM's volumes mounted again after a fresh boot.
// A pause or resume that fails leaves the sandbox as it was.
import { ControlPlaneError } from "../domain/errors.js";
import type { LifecycleEventType, SandboxRecord } from "../domain/sandbox.js";
import type { GuestVolume, Instance } from "../runtimes/runtime.js";
import type { Endpoint } from "../transport/endpoint.js";
import type { EnvdTarget } from "../transport/envd-rpc.js";
import { initResumed } from "./envd-ready.js";
import { forgetPausedFiles, isPausedToDisk, pauseToDisk, resumeFromDisk, type FsPauseDeps } from "./fs-pause.js";
import type { InstanceTable } from "./instances.js";
import type { ManagerOptions } from "./options.js";

/** What pausing and resuming need of the manager. */
export interface PauseDeps {
  o: ManagerOptions;
  fs: FsPauseDeps;
  instances: InstanceTable;
  save(rec: SandboxRecord): SandboxRecord;
  endpointOf(id: string, inst: Instance): Endpoint;
  mountGuestVolumes(target: EnvdTarget, volumes: GuestVolume[]): Promise<void>;
  /** A running instance: watched for its death from now on. */
  track(id: string, inst: Instance, runtime: string): void;
  emit(type: LifecycleEventType, sandbox: SandboxRecord): void;
}

export class SandboxPauses {
  constructor(private readonly d: PauseDeps) {}

  /** `memory: false`: to disk (its files kept, its instance gone); otherwise in memory. The caller holds the lock. */
  async pause(rec: SandboxRecord, memory = true): Promise<SandboxRecord> {
    if (rec.state === "paused") throw new ControlPlaneError("conflict", `sandbox '${rec.id}' is already paused`);
    const inst = this.d.instances.require(rec.id);
    this.d.save({ ...rec, state: "pausing" });
    if (!memory) {
      const runtimeData = await pauseToDisk(this.d.fs, rec, inst, false).catch((err: unknown) => {
        this.d.save(rec);
        throw err;
      });
      this.d.instances.take(rec.id);
      return this.paused(rec, runtimeData);
    }
    const endpoint = this.d.endpointOf(rec.id, inst);
    await endpoint.beforePause(() => this.closeOwnStreams(rec.id));
    try {
      await inst.pause();
    } catch (err) {
      endpoint.pauseFailed();
      this.d.save(rec);
      throw new ControlPlaneError("internal", `failed to pause sandbox '${rec.id}': ${(err as Error).message}`);
    }
    // A runtime may change what it needs to re-adopt the instance (Firecracker: the VMM process is gone).
    return this.paused(rec, inst.persisted);
  }

  /** A paused sandbox running again with `timeout` seconds to live. `memory: false` cold-boots one paused in memory from its files (E2B's onResume 'reboot'). */
  async resume(rec: SandboxRecord, timeout: number, memory?: boolean): Promise<SandboxRecord> {
    const { o, instances } = this.d;
    if (memory === false && !isPausedToDisk(rec)) {
      rec = this.d.save({ ...rec, runtimeData: await pauseToDisk(this.d.fs, rec, instances.require(rec.id), true) });
      instances.take(rec.id);
    }
    const fromDisk = isPausedToDisk(rec);
    let inst = fromDisk ? undefined : instances.require(rec.id);
    this.d.save({ ...rec, state: "resuming" });
    try {
      if (inst) await inst.resume();
      else this.d.track(rec.id, (inst = await resumeFromDisk(this.d.fs, rec)), rec.runtime);
      const endpoint = this.d.endpointOf(rec.id, inst);
      endpoint.afterResume();
      await initResumed(o.envd, rec, endpoint, inst, o.readyTimeoutMs);
      // A start again from disk is a fresh boot: its VM mounts its volumes again.
      if (fromDisk && inst.guestVolumes) await this.d.mountGuestVolumes({ endpoint, token: rec.envdAccessToken }, inst.guestVolumes);
    } catch (err) {
      // A sandbox paused to disk stays so (its files kept for the next try); the instance this try started goes.
      if (fromDisk) await instances.take(rec.id)?.kill().catch(() => undefined);
      this.d.save(rec);
      throw new ControlPlaneError("internal", `failed to resume sandbox '${rec.id}': ${(err as Error).message}`);
    }
    if (fromDisk) forgetPausedFiles(o.dataDir, rec.id);
    const running = this.d.save({ ...rec, state: "running", endAt: Date.now() + timeout * 1000, runtimeData: inst.persisted });
    o.log.info({ sandboxId: rec.id }, "sandbox resumed");
    this.d.emit("resumed", running);
    return running;
  }

  private paused(rec: SandboxRecord, runtimeData: Record<string, unknown>): SandboxRecord {
    const paused = this.d.save({ ...rec, state: "paused", runtimeData });
    this.d.o.log.info({ sandboxId: rec.id }, "sandbox paused");
    this.d.emit("paused", paused);
    return paused;
  }

  /** Before a `quiet` pause: the control plane's own streams to the sandbox close (they reopen on its resume). */
  private async closeOwnStreams(id: string): Promise<void> {
    await this.d.o.quiesce?.(id).catch((err: unknown) => this.d.o.log.warn({ err, sandboxId: id }, "closing streams before a pause failed"));
  }
}
