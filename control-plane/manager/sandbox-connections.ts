import type { Logger } from "pino";
import type { Instance } from "../runtimes/runtime.js";
import type { AgentPool } from "../transport/hybrid-vsock.js";

/**
 * The host's connections to one sandbox's envd across a pause, as its runtime
 * asks (`Instance.pauseConnections`): the manager calls these at each step and
 * never looks at the runtime's kind.
 *
 * - `keep`: nothing to do (the process runtime, gvisor paused in memory).
 * - `drop`: the pause ends the process holding them (Firecracker's VMM): pooled
 *   connections are dropped before it and again after the resume.
 * - `quiet`: the VM's vsock must see no host traffic while it is stopped (qemu
 *   with vhost-device-vsock): the control plane's own streams are closed, idle
 *   ones too, and every dial, write and close waits at the pool's gate until
 *   the resume (see VsockGate).
 */
export class SandboxConnections {
  constructor(
    private readonly pool: AgentPool,
    private readonly log: Logger,
    /** Closes the control plane's own streams to a sandbox (activity watch, sessions). */
    private readonly closeOwnStreams?: (sandboxId: string) => Promise<void>,
  ) {}

  async beforePause(id: string, inst: Instance): Promise<void> {
    const policy = inst.pauseConnections ?? "keep";
    if (policy === "drop") this.pool.drop(id);
    if (policy !== "quiet") return;
    await this.closeOwnStreams?.(id).catch((err: unknown) => this.log.warn({ err, sandboxId: id }, "closing streams before a pause failed"));
    this.pool.closeIdle(id);
    this.pool.hold(id);
  }

  /** They are dead (a memory snapshot closed them): drop the pooled ones. */
  drop(id: string): void {
    this.pool.drop(id);
  }

  /** The pause failed and the sandbox runs on: let held traffic through. */
  pauseFailed(id: string): void {
    this.pool.release(id);
  }

  afterResume(id: string, inst: Instance): void {
    if (inst.pauseConnections === "drop") this.pool.drop(id);
    this.pool.release(id);
  }

  /** A restarted control plane found this instance paused. */
  adoptedPaused(id: string, inst: Instance): void {
    if (inst.pauseConnections === "quiet") this.pool.hold(id);
  }

  /**
   * The control plane stops while a `quiet` sandbox is paused with connections
   * still open to it (a stream kept across the pause). Closing them with the VM
   * stopped would break its vsock for good, so run it for a moment, close
   * them, and stop it again.
   */
  async closeWhilePaused(id: string, inst: Instance | undefined): Promise<void> {
    if (inst?.pauseConnections !== "quiet" || this.pool.liveCount(id) === 0) return;
    try {
      await inst.resume();
      await this.pool.destroyLive(id);
      await inst.pause();
      this.log.info({ sandboxId: id }, "closed a paused VM's open connections while it ran for a moment");
    } catch (err) {
      this.log.warn({ err, sandboxId: id }, "closing a paused VM's connections before the control plane stops failed");
    }
  }
}
