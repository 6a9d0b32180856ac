// A stand-in runtime for fast tests of the manager's lifecycle edge cases
// (named so: it isolates nothing). Each "sandbox" is a real envd started in
// this process on a hybrid-vsock socket in the sandbox's directory, so the
// control plane's real transport, /init and proxy run against it; the
// runtime's own steps (pause, resume, death, adoption) are scripted by the
// test through `faults` and `instances`.
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { startEnvd, type RunningEnvd } from "../../envd/main.js";
import { SnapshotUnusableError } from "../../control-plane/runtimes/errors.js";
import type { Instance, InstanceSpec, InstanceStats, Runtime } from "../../control-plane/runtimes/runtime.js";
import type { PausePolicy } from "../../control-plane/transport/endpoint.js";
import type { SnapshotKind, SnapshotSource } from "../../control-plane/domain/snapshot.js";
import { requireHostEnvdTag, SELF } from "./accounts.js";

export interface Faults {
  /** The next pause() throws this. */
  pause?: Error;
  /** The next resume() throws this. */
  resume?: Error;
  /** pause() waits for this before it returns (a pause cut short by a restart). */
  pauseGate?: Promise<void>;
  /** After the next resume(), envd's socket is gone for this long (a guest slow to come back). */
  unreachableAfterResumeMs?: number;
  /** createFromSnapshot() refuses with this (as qemu does when a snapshot's backing image is gone). */
  snapshotUnusable?: string;
}

export class StandInInstance implements Instance {
  readonly socketPath: string;
  readonly persisted: Record<string, unknown>;
  state: "running" | "paused" | "dead" = "running";
  readonly calls: string[] = [];
  private exitListeners: ((reason: string) => void)[] = [];

  constructor(
    readonly sandboxId: string,
    private envd: RunningEnvd,
    private readonly faults: Faults,
    readonly pauseConnections: PausePolicy | undefined,
  ) {
    this.socketPath = envd.addresses[0]!.replace(/^unix\+vsock:\/\//, "");
    this.persisted = { standIn: sandboxId };
  }

  async pause(): Promise<void> {
    this.calls.push("pause");
    const gate = this.faults.pauseGate;
    if (gate) await gate;
    const err = this.faults.pause;
    this.faults.pause = undefined;
    if (err) throw err;
    this.state = "paused";
  }

  async resume(): Promise<void> {
    this.calls.push("resume");
    const err = this.faults.resume;
    this.faults.resume = undefined;
    if (err) throw err;
    this.state = "running";
    const away = this.faults.unreachableAfterResumeMs;
    this.faults.unreachableAfterResumeMs = undefined;
    if (away) {
      renameSync(this.socketPath, `${this.socketPath}.away`);
      setTimeout(() => renameSync(`${this.socketPath}.away`, this.socketPath), away);
    }
  }

  async kill(): Promise<void> {
    if (this.state === "dead") return;
    this.state = "dead";
    await this.envd.close();
  }

  async alive(): Promise<boolean> {
    return this.state !== "dead";
  }

  async stats(): Promise<InstanceStats> {
    return { cpuCount: 1, cpuUsedPct: 0, memUsedBytes: 0, memTotalBytes: 0, diskUsedBytes: 0, diskTotalBytes: 0 };
  }

  onExit(listener: (reason: string) => void): void {
    this.exitListeners.push(listener);
  }

  snapshotKinds(): SnapshotKind[] {
    return ["filesystem"];
  }

  async snapshot(dest: string): Promise<void> {
    writeFileSync(join(dest, "stand-in"), this.sandboxId);
  }

  /** The control plane stops watching (as real runtimes' detach does). */
  detach(): void {
    this.exitListeners = [];
  }

  async updateEgress(): Promise<void> {
    throw new Error("the stand-in runtime has no network of its own to filter");
  }

  async logs(): Promise<{ timestamp: number; line: string }[]> {
    return [];
  }

  /** The sandbox dies on its own (as a crash or an OOM would end it). */
  async die(reason: string): Promise<void> {
    await this.kill();
    for (const l of this.exitListeners) l(reason);
  }
}

export class StandInRuntime implements Runtime {
  readonly name = "stand-in";
  /** Every instance made, by sandbox id: they outlive a control plane, as real sandboxes do. */
  readonly instances = new Map<string, StandInInstance>();
  readonly faults: Faults = {};

  constructor(private readonly pauseConnections?: PausePolicy) {}

  async check(): Promise<string[]> {
    return ["stand-in runtime (tests): no isolation"];
  }

  async egressUnsupported(): Promise<string | undefined> {
    return "the stand-in runtime has no network of its own";
  }

  async volumesUnsupported(): Promise<string | undefined> {
    return "the stand-in runtime has no mounts of its own";
  }

  async create(spec: InstanceSpec): Promise<Instance> {
    requireHostEnvdTag();
    mkdirSync(spec.dir, { recursive: true });
    // As the tests' own user, whatever accounts the host has (test/helpers/accounts.ts).
    const envd = await startEnvd({ listen: [`unix+vsock://${join(spec.dir, "envd.sock")}`], defaultUser: SELF.name, log: spec.log as Logger });
    const inst = new StandInInstance(spec.sandboxId, envd, this.faults, this.pauseConnections);
    this.instances.set(spec.sandboxId, inst);
    return inst;
  }

  async createFromSnapshot(spec: InstanceSpec, _from: SnapshotSource): Promise<Instance> {
    if (this.faults.snapshotUnusable) throw new SnapshotUnusableError(this.faults.snapshotUnusable);
    return this.create(spec);
  }

  async adopt(sandboxId: string): Promise<Instance | undefined> {
    const inst = this.instances.get(sandboxId);
    return inst && inst.state !== "dead" ? inst : undefined;
  }
}
