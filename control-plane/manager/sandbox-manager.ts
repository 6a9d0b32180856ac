import { rmSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { ControlPlaneError } from "../domain/errors.js";
import type { EgressRules } from "../domain/network.js";
import { byStart, type CreateSandboxInput, type LifecycleEventType, type ListFilter, type SandboxRecord } from "../domain/sandbox.js";
import type { SandboxBoot } from "../domain/template.js";
import { closeEgressProxies } from "../runtimes/net/egress-proxy/proxies.js";
import { forgetPolicies } from "../runtimes/net/nft.js";
import type { GuestVolume, Instance } from "../runtimes/runtime.js";
import { RuntimeSet } from "../runtimes/runtime-set.js";
import type { Endpoint } from "../transport/endpoint.js";
import type { EnvdTarget } from "../transport/envd-rpc.js";
import { adoptRecord } from "./adopt.js";
import { Admission, defaultAdmissionLimits, type AdmissionStats } from "./admission.js";
import { SandboxCreates } from "./create.js";
import { applyNetworkUpdate, networkAfterUpdate } from "./egress.js";
import { waitForEnvd } from "./envd-ready.js";
import { LifecycleBus } from "./events.js";
import { forgetPausedFiles, isPausedToDisk, type FsPauseDeps } from "./fs-pause.js";
import { InstanceTable } from "./instances.js";
import { removeLeftovers } from "./leftovers.js";
import { KeyedLock } from "./locks.js";
import type { ManagerLimits, ManagerOptions } from "./options.js";
import { SandboxPauses } from "./pause-resume.js";
import { checkTimeout, pushInit } from "./records.js";
import { SandboxTable } from "./sandbox-table.js";
import { Timeouts } from "./timeouts.js";
import { WarmPool, type WarmShape } from "./warm-pool.js";
import { WarmPools } from "./warm-pools.js";

export type { ManagerLimits, ManagerOptions } from "./options.js";

/**
 * The sandbox lifecycle: creating → running ⇄ (pausing → paused → resuming)
 * → killed, with timeouts, capacity, restarts and re-adoption. Every
 * operation on one sandbox is serialised; the store is written before an
 * operation is acknowledged.
 */
export class SandboxManager {
  readonly events = new LifecycleBus();
  private readonly instances = new InstanceTable();
  private readonly locks = new KeyedLock();
  private readonly runtimes: RuntimeSet;
  private readonly warm: WarmPools;
  private readonly admission: Admission;
  private readonly timeouts: Timeouts;
  /** The live records: read from memory, written through to the store. */
  private readonly table: SandboxTable;
  private closed = false;
  private readonly fs: FsPauseDeps;
  private readonly creates: SandboxCreates;
  private readonly pauses: SandboxPauses;

  constructor(private readonly o: ManagerOptions) {
    this.runtimes = o.runtimes ?? new RuntimeSet(o.runtime);
    this.table = new SandboxTable(o.store, o.log, o.node);
    this.admission = new Admission(o.admission ?? defaultAdmissionLimits());
    this.fs = { ...o, runtimes: this.runtimes, dir: (id) => this.dir(id), waitReady: (id, inst) => this.waitReady(id, inst) };
    this.timeouts = new Timeouts({ ...o, table: this.table, locks: this.locks, maxSeconds: o.limits.maxTimeoutSeconds, get: (id) => this.get(id), expire: (rec) => this.expire(rec) });
    const base = o.warmPool ? this.warmPool({ templateId: "base", ...o.defaults }, { image: "base" }, o.warmPool) : undefined;
    this.warm = new WarmPools({
      ...(base ? { base } : {}),
      perTemplate: o.templateWarmPool ?? 0,
      make: (shape, boot, size) => this.warmPool(shape, boot, size),
      log: o.log.child({ component: "warm-pool" }),
    });
    this.creates = new SandboxCreates({
      o,
      table: this.table,
      warm: this.warm,
      admission: this.admission,
      runtimes: this.runtimes,
      locks: this.locks,
      dir: (id) => this.dir(id),
      waitReady: (id, inst) => this.waitReady(id, inst),
      endpointOf: (id, inst) => this.endpointOf(id, inst),
      durable: (op) => this.durable(op),
      mountGuestVolumes: (target, volumes) => this.mountGuestVolumes(target, volumes),
      trustEgressCa: (target) => this.trustEgressCa(target),
      track: (id, inst, runtime) => this.track(id, inst, runtime),
      emit: (type, sandbox) => this.emit(type, sandbox),
    });
    this.pauses = new SandboxPauses({
      o,
      fs: this.fs,
      instances: this.instances,
      save: (rec) => this.save(rec),
      endpointOf: (id, inst) => this.endpointOf(id, inst),
      mountGuestVolumes: (target, volumes) => this.mountGuestVolumes(target, volumes),
      track: (id, inst, runtime) => this.track(id, inst, runtime),
      emit: (type, sandbox) => this.emit(type, sandbox),
    });
  }

  /** A pool of `size` sandboxes of `shape`, envd up, prepared, and the template's start command ready. */
  private warmPool(shape: WarmShape, boot: SandboxBoot, size: number): WarmPool {
    return new WarmPool({
      size,
      shape,
      runtime: () => this.runtimes.forTemplate(shape.templateId),
      dir: (id) => this.dir(id),
      waitReady: async (id, inst) => {
        await this.waitReady(id, inst);
        const target = { endpoint: this.endpointOf(id, inst), token: "" };
        await this.o.prepare?.(target, this.dir(id));
        await this.o.startCommand?.(target, boot);
      },
      admit: (start) => this.admission.run(start, { background: true }),
      log: this.o.log.child({ component: "warm-pool", image: shape.templateId }),
    });
  }

  private async mountGuestVolumes(target: EnvdTarget, volumes: GuestVolume[]): Promise<void> {
    if (!this.o.mountGuestVolumes) throw new Error("this server cannot mount volumes inside VMs");
    await this.o.mountGuestVolumes(target, volumes);
  }

  private waitReady(id: string, inst: Instance): Promise<void> {
    return waitForEnvd(this.o.envd, this.endpointOf(id, inst), inst, this.o.readyTimeoutMs);
  }

  /** How the control plane reaches an instance's envd: the only place an instance's socket is read. */
  private endpointOf(id: string, inst: Instance): Endpoint {
    return this.o.transport.local(id, inst.socketPath, inst.pauseConnections);
  }

  /** The control plane stops with a sandbox paused and connections open to it (Endpoint.closeWhilePaused). */
  private async closeWhilePaused(id: string): Promise<void> {
    const inst = this.instances.get(id);
    if (!inst) return;
    try {
      if (await this.endpointOf(id, inst).closeWhilePaused(inst)) {
        this.o.log.info({ sandboxId: id }, "closed a paused VM's open connections while it ran for a moment");
      }
    } catch (err) {
      this.o.log.warn({ err, sandboxId: id }, "closing a paused VM's connections before the control plane stops failed");
    }
  }

  get runtimeName(): string { return this.o.runtime.name; }

  /** Re-adopts what survived a restart and starts the timeout reaper. */
  async start(): Promise<void> {
    for (const rec of await this.table.load()) {
      await this.locks.run(rec.id, () => this.adopt(rec));
    }
    await this.table.flushed();
    this.timeouts.start();
    await removeLeftovers({ ...this.o, runtimeByName: (n) => this.runtimes.byName(n) });
    this.warm.pool("base")?.fill();
  }

  /** Starts in progress and waiting, and the limits (metrics). */
  admissionStats = (): AdmissionStats => this.admission.stats();

  /** The host's limits (capacity page) and its warm pools. */
  get limits(): ManagerLimits { return this.o.limits; }
  warmPools = () => this.warm.states();

  /** Warm sandboxes ready to be handed out (metrics, tests). */
  get warmCount(): number { return this.warm.count; }

  /** An image's warm sandboxes go (its template was deleted or rebuilt). */
  dropWarm(image: string): Promise<void> {
    return this.warm.drop(image);
  }

  /** Stops the reaper, kills warm sandboxes and closes connections; sandboxes keep running for the next start. */
  async close(): Promise<void> {
    this.closed = true;
    this.timeouts.stop();
    await this.warm.close();
    await this.runtimes.close();
    for (const rec of this.list({ states: ["paused"] })) await this.locks.run(rec.id, () => this.closeWhilePaused(rec.id));
    forgetPolicies(this.instances.ids());
    await closeEgressProxies(this.instances.ids());
    for (const inst of this.instances.all()) inst.detach();
    this.o.transport.destroy();
  }

  private adopt(rec: SandboxRecord): Promise<void> {
    return adoptRecord(
      { ...this.o, runtimes: this.runtimes, endpoint: (id, inst) => this.endpointOf(id, inst), dir: (id) => this.dir(id), track: (id, inst, rt) => this.track(id, inst, rt), markDead: (r, why) => this.markDead(r, why), save: (r) => this.save(r) },
      rec,
    );
  }

  /** Host memory per live sandbox, where its runtime can tell (metrics). */
  hostMemory = (): { sandboxId: string; runtime: string; bytes: number }[] => this.instances.hostMemory();

  /** A sandbox's own directory (its runtime's files; what a snapshot of it depends on is recorded there: images/image-refs.ts). */
  dir(id: string): string {
    return join(this.o.dataDir, "sandboxes", id);
  }

  private save(rec: SandboxRecord): SandboxRecord {
    return this.table.put(rec);
  }

  /** `op`'s result once the store holds what it wrote: what every public operation acknowledges. */
  private async durable<T>(op: Promise<T>): Promise<T> {
    const out = await op;
    await this.table.flushed();
    return out;
  }

  private emit(type: LifecycleEventType, sandbox: SandboxRecord): void {
    this.events.emit({ type, sandbox, time: Date.now() });
  }

  private track(id: string, inst: Instance, runtime: string): void {
    this.instances.set(id, inst, runtime);
    inst.onExit((reason) => {
      if (this.closed) return; // the next server adopts it, or finds it gone
      void this.locks.run(id, async () => {
        const rec = this.table.get(id);
        if (!rec || this.instances.get(id) !== inst) return;
        this.instances.take(id);
        this.o.transport.forget(id);
        this.markDead(rec, `died: ${reason}`);
        this.o.log.warn({ sandboxId: id, reason }, "sandbox died");
        // Nothing of a dead sandbox stays on disk (its runtime released the rest).
        setTimeout(() => void rm(this.dir(id), { recursive: true, force: true }).catch(() => undefined), 2_000).unref();
      });
    });
  }

  private markDead(rec: SandboxRecord, reason: string): void {
    const dead = this.save({ ...rec, state: "killed", endReason: reason, endAt: Math.min(rec.endAt, Date.now()) });
    this.emit("killed", dead);
  }

  /** A new sandbox (create.ts): a warm one when one fits, else one started for it. */
  create(input: CreateSandboxInput): Promise<SandboxRecord> {
    return this.creates.create(input);
  }

  /** A sandbox that exists (running or paused, or transitioning), else not_found. */
  get(id: string): SandboxRecord {
    const rec = this.table.get(id);
    if (!rec) throw new ControlPlaneError("not_found", `sandbox '${id}' not found`);
    return rec;
  }

  /** This host's sandboxes (never killed ones: they left the table; the store keeps them a while). */
  list(filter: ListFilter = {}): SandboxRecord[] {
    return this.table.list(filter);
  }

  /** As list, and killed sandboxes too when `filter.states` asks for them (their records are read from the store). */
  async listWithEnded(filter: ListFilter = {}): Promise<SandboxRecord[]> {
    if (!filter.states?.includes("killed")) return this.list(filter);
    const live = filter.states.filter((s) => s !== "killed");
    const ended = await this.o.store.listSandboxes({ ...filter, states: ["killed"], ...(this.o.node !== undefined ? { node: this.o.node } : {}) });
    return [...(live.length ? this.list({ ...filter, states: live }) : []), ...ended].sort(byStart);
  }

  /** Any sandbox's record, a killed one's too (events about it): from memory when it is live or ended lately. */
  async record(id: string): Promise<SandboxRecord | undefined> {
    return this.table.recent(id) ?? (await this.o.store.getSandbox(id));
  }

  /** `memory: false`: E2B's filesystem-only pause (fs-pause.ts); otherwise (and by default) in memory. */
  async pause(id: string, memory?: boolean): Promise<SandboxRecord> {
    return this.durable(this.locks.run(id, () => this.pauses.pause(this.get(id), memory)));
  }

  private instance = (rec: SandboxRecord): Instance => this.instances.require(rec.id);

  /** Runs `fn` on a running or paused sandbox's record and instance, under its lock (snapshots). */
  withInstance<T>(id: string, fn: (rec: SandboxRecord, inst: Instance) => Promise<T>): Promise<T> {
    return this.locks.run(id, async () => {
      const rec = this.get(id);
      const why = rec.state !== "running" && rec.state !== "paused" ? rec.state : isPausedToDisk(rec) ? "paused to disk: resume it first" : "";
      if (why) throw new ControlPlaneError("conflict", `sandbox '${id}' is ${why}`);
      return fn(rec, this.instance(rec));
    });
  }

  /** E2B connect: a running sandbox gets its timeout extended (never shortened); a paused one is resumed with a fresh timeout. */
  async connect(id: string, timeoutSeconds: number, memory?: boolean): Promise<{ sandbox: SandboxRecord; resumed: boolean }> {
    const timeout = checkTimeout(timeoutSeconds, this.o.limits.maxTimeoutSeconds);
    return this.durable(this.locks.run(id, async () => {
      const rec = this.get(id);
      if (rec.state === "paused") return { sandbox: await this.pauses.resume(rec, timeout, memory), resumed: true };
      const endAt = Math.max(rec.endAt, Date.now() + timeout * 1000);
      return { sandbox: this.save({ ...rec, endAt }), resumed: false };
    }));
  }

  /** The deprecated explicit resume: only for paused sandboxes (409 otherwise). */
  async resume(id: string, timeoutSeconds: number, autoPause?: boolean, memory?: boolean): Promise<SandboxRecord> {
    const timeout = checkTimeout(timeoutSeconds, this.o.limits.maxTimeoutSeconds);
    return this.durable(this.locks.run(id, async () => {
      const rec = this.get(id);
      if (rec.state !== "paused") throw new ControlPlaneError("conflict", `sandbox '${id}' is already running`);
      const resumed = await this.pauses.resume(rec, timeout, memory);
      return autoPause === undefined ? resumed : this.save({ ...resumed, onTimeout: autoPause ? "pause" : "kill" });
    }));
  }

  async kill(id: string, reason = "killed"): Promise<void> {
    await this.durable(this.locks.run(id, async () => {
      const rec = this.get(id);
      await this.killLocked(rec, reason);
    }));
  }

  private async killLocked(rec: SandboxRecord, reason: string): Promise<void> {
    // Taken first: from here on its traffic is answered "not found", as after the kill (isGone), so a
    // client whose stream ended because envd died first is not told the sandbox is merely unreachable.
    const inst = this.instances.take(rec.id);
    this.o.transport.get(rec.id)?.drop();
    await inst?.kill();
    this.o.transport.forget(rec.id);
    rmSync(this.dir(rec.id), { recursive: true, force: true });
    forgetPausedFiles(this.o.dataDir, rec.id);
    const dead = this.save({ ...rec, state: "killed", endReason: reason, endAt: Date.now() });
    this.o.log.info({ sandboxId: rec.id, reason }, "sandbox killed");
    this.emit("killed", dead);
  }

  /** A running sandbox past its end (under its lock): its timeout action. */
  private async expire(rec: SandboxRecord): Promise<void> {
    this.emit("timed_out", rec);
    if (rec.onTimeout === "pause") await this.pauses.pause(rec, rec.pauseMemory ?? true);
    else await this.killLocked(rec, "timeout");
  }

  /** POST /timeout: the sandbox now ends `seconds` from now (shorter or longer; 0: its timeout action runs now). */
  setTimeout(id: string, seconds: number): Promise<SandboxRecord> {
    return this.durable(this.timeouts.set(id, seconds));
  }

  /** PUT /sandboxes/{id}/network: replaces the egress rules of a sandbox that has its own network. */
  async updateNetwork(id: string, rules: EgressRules, allowInternetAccess: boolean): Promise<SandboxRecord> {
    return this.durable(this.locks.run(id, async () => {
      const rec = this.get(id);
      const inst = this.instances.get(id);
      // Rules need the CA in the sandbox first: a running sandbox gets it (and the variables) before the proxy intercepts.
      const gainsRules = !!rules.rules && !Object.keys(rec.network?.rules ?? {}).length;
      const next = { ...rec, allowInternetAccess, network: networkAfterUpdate(rec.network, rules) };
      if (gainsRules && inst && rec.state === "running") {
        const endpoint = this.endpointOf(id, inst);
        await this.trustEgressCa({ endpoint, token: rec.envdAccessToken });
        await pushInit(this.o.envd, next, endpoint, inst);
      } else if (gainsRules) {
        throw new ControlPlaneError("conflict", `sandbox '${id}' is ${rec.state}: resume it to give it network rules (it must be running to trust the egress proxy's CA)`);
      }
      await applyNetworkUpdate(rec, inst, rules, allowInternetAccess);
      const runtimeData = this.instances.get(id)?.persisted ?? rec.runtimeData;
      return this.save({ ...next, runtimeData });
    }));
  }

  private async trustEgressCa(target: EnvdTarget): Promise<void> {
    if (!this.o.trustEgressCa) throw new ControlPlaneError("invalid", "network.rules: this server cannot intercept requests (no egress CA)");
    await this.o.trustEgressCa(target);
  }

  /** POST /refreshes: extends only. */
  refresh(id: string, seconds: number): Promise<SandboxRecord> {
    return this.durable(this.timeouts.extend(id, seconds));
  }

  /**
   * Where the proxy sends a running sandbox's traffic. A paused sandbox with
   * autoResume is resumed first; otherwise `unavailable` (not running).
   */
  async endpoint(id: string): Promise<{ sandbox: SandboxRecord; endpoint: Endpoint }> {
    let rec = this.get(id);
    if (this.beingKilled(rec)) throw new ControlPlaneError("not_found", `sandbox '${id}' is being killed`);
    // Traffic never cold-boots a sandbox paused to disk (E2B: an explicit connect or resume only).
    if (rec.state === "paused" && rec.autoResume && !isPausedToDisk(rec)) {
      // Its original timeout, within the limit (a sandbox refreshed for days has lived longer than any timeout).
      const seconds = Math.min(this.o.limits.maxTimeoutSeconds, Math.max(1, Math.ceil((rec.endAt - rec.startedAt) / 1000)));
      rec = (await this.connect(id, seconds)).sandbox;
    }
    if (rec.state !== "running") {
      throw new ControlPlaneError("unavailable", `sandbox '${id}' is ${rec.state}, not running: connect to it to resume it`);
    }
    return { sandbox: rec, endpoint: this.endpointOf(id, this.instance(rec)) };
  }

  /** Does the sandbox have a live instance (none once a kill or its death has begun; none while paused to disk)? No store read. */
  hasInstance(id: string): boolean {
    return this.instances.get(id) !== undefined;
  }

  /** Is the sandbox killed, being killed, or unknown? */
  isGone(id: string): boolean {
    const rec = this.table.get(id);
    return !rec || this.beingKilled(rec);
  }

  /** Running with its instance taken: the kill takes the instance first (killLocked). */
  private beingKilled(rec: SandboxRecord): boolean {
    return rec.state === "running" && !this.instances.get(rec.id);
  }

  /** The endpoint of a sandbox that runs now, without resuming it (activity watchers, metric sampling). */
  runningEndpoint(id: string): { sandbox: SandboxRecord; endpoint: Endpoint } | undefined {
    const rec = this.table.get(id);
    const inst = this.instances.get(id);
    if (!rec || rec.state !== "running" || !inst) return undefined;
    return { sandbox: rec, endpoint: this.endpointOf(id, inst) };
  }

  /** A memory snapshot closed the sandbox's connections (gVisor's checkpoint): pooled ones are dead. */
  dropConnections(id: string): void {
    this.o.transport.get(id)?.drop();
  }

  async stats(id: string) {
    const rec = this.get(id);
    return { sandbox: rec, stats: await this.instance(rec).stats() };
  }

  async logs(id: string): Promise<{ timestamp: number; line: string }[]> {
    return (await this.instances.get(this.get(id).id)?.logs()) ?? [];
  }
}
