// Creating a sandbox: its template resolved to an image and a runtime, its
// shape, egress and volumes checked; then a warm sandbox of that shape handed
// out when one fits (its settings pushed through /init), else one started for
// it under the host's admission (start slots, bounded queue) and capacity. A
// start that fails leaves nothing: its instance killed, its record and
// directory gone, and the console's last lines in the error.
import { createHash } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { ControlPlaneError } from "../domain/errors.js";
import type { CreateSandboxInput, LifecycleEventType, SandboxRecord } from "../domain/sandbox.js";
import type { SandboxBoot } from "../domain/template.js";
import type { VolumeBinding } from "../domain/volume.js";
import { SnapshotUnusableError } from "../runtimes/errors.js";
import type { GuestVolume, Instance, InstanceSpec, Runtime } from "../runtimes/runtime.js";
import type { RuntimeSet } from "../runtimes/runtime-set.js";
import type { Endpoint } from "../transport/endpoint.js";
import type { EnvdTarget } from "../transport/envd-rpc.js";
import type { Admission } from "./admission.js";
import { egressFor } from "./egress.js";
import { deriveToken, newSandboxId } from "./ids.js";
import type { KeyedLock } from "./locks.js";
import type { ManagerOptions } from "./options.js";
import { checkCapacity, checkTimeout, newRecord, pushInit } from "./records.js";
import type { SandboxTable } from "./sandbox-table.js";
import { volumeLease } from "./volumes.js";
import type { WarmPool, WarmSandbox, WarmShape } from "./warm-pool.js";
import type { WarmPools } from "./warm-pools.js";

/** What creating needs of the manager: its parts, and the steps it shares with adoption and resume. */
export interface CreateDeps {
  o: ManagerOptions;
  table: SandboxTable;
  warm: WarmPools;
  admission: Admission;
  runtimes: RuntimeSet;
  locks: KeyedLock;
  dir(id: string): string;
  waitReady(id: string, inst: Instance): Promise<void>;
  endpointOf(id: string, inst: Instance): Endpoint;
  /** `op`'s result once the store holds what it wrote. */
  durable<T>(op: Promise<T>): Promise<T>;
  mountGuestVolumes(target: EnvdTarget, volumes: GuestVolume[]): Promise<void>;
  trustEgressCa(target: EnvdTarget): Promise<void>;
  /** A running instance: watched for its death from now on. */
  track(id: string, inst: Instance, runtime: string): void;
  emit(type: LifecycleEventType, sandbox: SandboxRecord): void;
}

export class SandboxCreates {
  constructor(private readonly d: CreateDeps) {}

  async create(input: CreateSandboxInput): Promise<SandboxRecord> {
    const template = input.boot ? { templateId: input.templateId, boot: input.boot } : await this.d.o.templates.resolve(input.templateId);
    if (!template) {
      const pending = this.d.o.templates.pending?.(input.templateId);
      if (pending) throw new ControlPlaneError("unavailable", pending);
      throw new ControlPlaneError("not_found", `template '${input.templateId}' not found (available: ${(await this.d.o.templates.names()).join(", ")}; build one with the E2B Template SDK or 'locale2b template build <name>')`);
    }
    const image = template.boot.image;
    const timeout = checkTimeout(input.timeout, this.d.o.limits.maxTimeoutSeconds);
    if (this.d.o.ensureImage && !input.fromSnapshot) {
      await this.d.o.ensureImage(image).catch((err: Error) => {
        throw new ControlPlaneError("unavailable", `template '${input.templateId}' is not on this node and could not be copied here: ${err.message}`);
      });
    }
    const from = input.fromSnapshot;
    const runtime = await (from ? this.d.runtimes.byName(from.runtime) : this.d.runtimes.forTemplate(image)).catch((err: Error) => {
      throw new ControlPlaneError("unavailable", `template '${input.templateId}' runs on a runtime this host cannot start: ${err.message}`);
    });
    const memoryMB = input.memoryMB ?? ("memoryMB" in template ? template.memoryMB : undefined) ?? this.d.o.defaults.memoryMB;
    const cpuCount = input.cpuCount ?? ("cpuCount" in template ? template.cpuCount : undefined) ?? this.d.o.defaults.cpuCount;
    const shape = { templateId: image, cpuCount, memoryMB, diskSizeMB: input.diskSizeMB ?? this.d.o.defaults.diskSizeMB };
    input = { ...input, templateId: template.templateId, boot: template.boot, ...("alias" in template && template.alias ? { alias: template.alias } : {}) };
    const egress = await egressFor(runtime, input.network, input.allowInternetAccess ?? true);
    const lease = input.volumeMounts?.length ? await volumeLease(this.d.o.volumes, runtime, input.volumeMounts) : undefined;
    if (!lease) return this.createOn(input, template, runtime, shape, timeout, egress, image, from);
    try {
      // A warm sandbox has no mounts: a create with volumes starts its own.
      input = { ...input, volumeMounts: lease.bindings.map((b) => ({ name: b.name, path: b.path })) };
      checkCapacity(this.d.table.list(), this.d.o.limits, shape);
      return await this.d.durable(this.d.admission.run(() => this.createNew(input, runtime, shape, timeout, egress, lease.bindings)));
    } finally {
      lease.release();
    }
  }

  /** A create without volumes: a warm sandbox when one fits, else a new one. */
  private async createOn(
    input: CreateSandboxInput,
    template: { boot: SandboxBoot },
    runtime: Runtime,
    shape: WarmShape,
    timeout: number,
    egress: Awaited<ReturnType<typeof egressFor>>,
    image: string,
    from: CreateSandboxInput["fromSnapshot"],
  ): Promise<SandboxRecord> {
    const memoryMB = shape.memoryMB;
    const pool = this.d.warm.pool(image);
    // A template's start command ran before any create: it has the create's env vars only through envd, so a create with its own waits for a fresh one.
    const envsOk = !template.boot.startCmd || Object.keys(input.envVars ?? {}).length === 0;
    if (!egress && !from && envsOk && pool?.matches(shape, input.allowInternetAccess ?? true)) {
      const warm = pool.take();
      if (warm && warm.runtime === runtime) {
        const rec = await this.d.durable(this.claimWarm(warm, input, shape, timeout, pool)).catch((err: unknown) => {
          if (err instanceof ControlPlaneError) throw err; // capacity: the same answer a new one would get
          this.d.o.log.warn({ err, sandboxId: warm.id }, "handing out a warm sandbox failed: starting a new one");
          return undefined;
        });
        if (rec) return rec;
      } else if (warm) {
        await pool.discard(warm);
      }
    } else if (!from && !pool && image !== "base" && (template.boot.startCmd || template.boot.readyCmd)) {
      // A template whose sandboxes take long to get ready (a start command): warm ones for the next creates.
      this.d.warm.noteCold(shape, template.boot);
    }
    // Over the sandbox limit: refused before queueing. Then one of the host's
    // start slots (or a place in the bounded queue, else 429): the readiness
    // deadline below starts only once this start runs.
    checkCapacity(this.d.table.list(), this.d.o.limits, shape);
    return this.d.durable(this.d.admission.run(() => this.createNew(input, runtime, shape, timeout, egress)));
  }

  private createNew(input: CreateSandboxInput, runtime: Runtime, shape: WarmShape, timeout: number, egress: Awaited<ReturnType<typeof egressFor>>, volumes?: VolumeBinding[]): Promise<SandboxRecord> {
    const id = newSandboxId();
    return this.d.locks.run(id, async () => {
      checkCapacity(this.d.table.list(), this.d.o.limits, shape);
      const now = Date.now();
      let rec = this.d.table.put(newRecord(this.d.o.seed, id, input, shape, timeout, runtime.name));
      const log = this.d.o.log.child({ sandboxId: id });
      const dir = this.d.dir(id);
      mkdirSync(dir, { recursive: true });
      let inst: Instance | undefined;
      try {
        const spec = { sandboxId: id, ...shape, dir, allowInternetAccess: rec.allowInternetAccess, egress, log, ...(volumes?.length ? { volumes } : this.warmUpFor(rec)) };
        inst = await (input.fromSnapshot ? runtime.createFromSnapshot(spec, input.fromSnapshot) : runtime.create(spec));
        rec = this.d.table.put({ ...rec, runtimeData: inst.persisted });
        await this.d.waitReady(id, inst);
        const from = input.fromSnapshot;
        const endpoint = this.d.endpointOf(id, inst);
        await pushInit(this.d.o.envd, rec, endpoint, inst, from?.kind === "memory" && from.sandboxId ? deriveToken(this.d.o.seed, "envd", from.sandboxId) : undefined);
        if (inst.guestVolumes) await this.d.mountGuestVolumes({ endpoint, token: rec.envdAccessToken }, inst.guestVolumes);
        await this.d.o.prepare?.({ endpoint, token: rec.envdAccessToken }, dir, inst.restoredGuest);
        if (egress?.rules) await this.d.trustEgressCa({ endpoint, token: rec.envdAccessToken });
        // A memory snapshot's processes run on (its start command among them); a fresh start runs it.
        if (from?.kind !== "memory" && !inst.warmedUp) await this.d.o.startCommand?.({ endpoint, token: rec.envdAccessToken }, rec.boot);
      } catch (err) {
        // The console says why a guest never got to envd; the directory holding it goes below.
        const consoleTail = (await inst?.logs().catch(() => []))?.slice(-40).map((l) => l.line) ?? [];
        log.error({ err, console: consoleTail }, "sandbox creation failed");
        this.d.o.transport.get(id)?.drop();
        await inst?.kill().catch(() => undefined);
        this.d.o.transport.forget(id);
        this.d.table.delete(id);
        rmSync(dir, { recursive: true, force: true });
        const tail = consoleTail.length ? `; last console lines: ${consoleTail.slice(-3).join(" | ")}` : "";
        if (err instanceof SnapshotUnusableError) throw new ControlPlaneError("conflict", err.message);
        throw new ControlPlaneError("internal", `failed to create sandbox: ${(err as Error).message}${tail}`);
      }
      return this.created(rec, inst, runtime.name, timeout, now);
    });
  }

  /**
   * A template's start command for a runtime that checkpoints booted
   * sandboxes (InstanceSpec.warmUp): only for creates without env vars of
   * their own (the checkpoint's start command ran without them).
   */
  private warmUpFor(rec: SandboxRecord): Pick<InstanceSpec, "warmUp"> {
    const boot = rec.boot;
    if (!boot?.startCmd || !this.d.o.startCommand || Object.keys(rec.envVars).length > 0) return {};
    const start = this.d.o.startCommand;
    const key = createHash("sha256").update(JSON.stringify([boot.startCmd, boot.readyCmd ?? null, boot.user ?? null, boot.workdir ?? null, boot.envs ?? {}])).digest("hex").slice(0, 12);
    return { warmUp: { key, run: (endpoint) => start({ endpoint, token: "" }, boot) } };
  }

  /** Hands a warm sandbox out: its record, then the create's settings through /init. */
  private claimWarm(warm: WarmSandbox, input: CreateSandboxInput, shape: WarmShape, timeout: number, pool: WarmPool): Promise<SandboxRecord> {
    return this.d.locks.run(warm.id, async () => {
      const now = Date.now();
      try {
        checkCapacity(this.d.table.list(), this.d.o.limits, shape);
        const rec = this.d.table.put({ ...newRecord(this.d.o.seed, warm.id, input, shape, timeout, warm.runtime.name), runtimeData: warm.inst.persisted });
        warm.inst.foreground?.();
        await pushInit(this.d.o.envd, rec, this.d.endpointOf(warm.id, warm.inst), warm.inst);
        return this.created(rec, warm.inst, warm.runtime.name, timeout, now);
      } catch (err) {
        this.d.table.delete(warm.id);
        this.d.o.transport.forget(warm.id);
        await pool.discard(warm);
        throw err;
      }
    });
  }

  private created(rec: SandboxRecord, inst: Instance, runtime: string, timeout: number, since: number): SandboxRecord {
    this.d.track(rec.id, inst, runtime);
    const running = this.d.table.put({ ...rec, state: "running", startedAt: Date.now(), endAt: Date.now() + timeout * 1000 });
    this.d.o.log.info({ sandboxId: rec.id, templateId: rec.templateId, runtime, ms: Date.now() - since }, "sandbox created");
    this.d.emit("created", running);
    return running;
  }
}
