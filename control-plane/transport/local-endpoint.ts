import http2 from "node:http2";
import type { Duplex } from "node:stream";
import { ENVD_PORT } from "../../envd/version.js";
import type { Endpoint, Pausable, PausePolicy } from "./endpoint.js";
import { dialGuestPort, dialHybridVsock, HybridVsockAgent, VsockGate } from "./hybrid-vsock.js";

/**
 * A sandbox on this host, reached through a Unix socket that speaks the
 * hybrid-vsock handshake (every runtime offers one: the process runtime
 * itself, QEMU through vhost-device-vsock, Firecracker through its vsock
 * socket, gVisor through a host-uds socket). Connections are pooled per port;
 * every connection, pooled or not, goes through the sandbox's gate.
 */
export class LocalEndpoint implements Endpoint {
  private readonly agents = new Map<number, HybridVsockAgent>();
  private controlAgent: HybridVsockAgent | undefined;
  private session: Promise<http2.ClientHttp2Session> | undefined;
  readonly gate = new VsockGate();

  constructor(
    readonly sandboxId: string,
    private path: string,
    private policy: PausePolicy = "keep",
  ) {}

  get socketPath(): string {
    return this.path;
  }

  /**
   * The instance behind the sandbox changed (a resume from disk): its
   * connections go, the gate stays (it may hold traffic for this sandbox).
   */
  retarget(socketPath: string, policy: PausePolicy = "keep"): void {
    if (socketPath !== this.path) this.drop();
    this.path = socketPath;
    this.policy = policy;
  }

  agent(port = ENVD_PORT): HybridVsockAgent {
    let agent = this.agents.get(port);
    if (!agent) {
      agent = new HybridVsockAgent(this.path, port, this.gate, ENVD_PORT);
      this.agents.set(port, agent);
    }
    return agent;
  }

  control(): HybridVsockAgent {
    this.controlAgent ??= new HybridVsockAgent(this.path, ENVD_PORT, this.gate);
    return this.controlAgent;
  }

  dial(port: number): Promise<Duplex> {
    return port === ENVD_PORT ? dialHybridVsock(this.path, port, undefined, this.gate) : dialGuestPort(this.path, port, undefined, this.gate);
  }

  h2(): Promise<http2.ClientHttp2Session> {
    if (this.session) return this.session;
    const session = dialHybridVsock(this.path, ENVD_PORT, undefined, this.gate).then((socket) => {
      const s = http2.connect(`http://${ENVD_PORT}-${this.sandboxId}`, { createConnection: () => socket });
      const forget = () => {
        if (this.session === session) this.session = undefined;
      };
      s.on("close", forget);
      s.on("error", forget);
      s.on("goaway", forget);
      return s;
    });
    session.catch(() => {
      if (this.session === session) this.session = undefined;
    });
    this.session = session;
    return session;
  }

  get liveCount(): number {
    return this.gate.liveCount;
  }

  drop(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
    this.controlAgent?.destroy();
    this.controlAgent = undefined;
    const session = this.session;
    this.session = undefined;
    void session?.then((s) => s.destroy(), () => undefined);
  }

  /**
   * Closes the idle pooled connections (in-flight ones stay). Before a QEMU VM
   * is stopped: a close that reaches a stopped VM's vsock (a keep-alive
   * timeout, a server restart) would break it for good.
   */
  closeIdle(): void {
    for (const agent of [...this.agents.values(), ...(this.controlAgent ? [this.controlAgent] : [])]) {
      for (const sockets of Object.values(agent.freeSockets)) for (const s of sockets ?? []) s.destroy();
    }
  }

  async beforePause(closeOwnStreams: () => Promise<void>): Promise<void> {
    if (this.policy === "drop") this.drop();
    if (this.policy !== "quiet") return;
    await closeOwnStreams();
    this.closeIdle();
    this.gate.hold();
  }

  pauseFailed(): void {
    this.gate.release();
  }

  afterResume(): void {
    if (this.policy === "drop") this.drop();
    this.gate.release();
  }

  adoptedPaused(): void {
    if (this.policy === "quiet") this.gate.hold();
  }

  async closeWhilePaused(vm: Pausable): Promise<boolean> {
    if (this.policy !== "quiet" || this.liveCount === 0) return false;
    await vm.resume();
    await this.gate.destroyLive();
    await vm.pause();
    return true;
  }

  /** The sandbox is gone (killed or dead): its connections close and anything held goes. */
  close(): void {
    this.drop();
    this.gate.release();
  }

  /**
   * The control plane stops. A held gate (a stopped VM) is abandoned, not
   * released: its waiting dials fail and its deferred closes never reach the
   * VM (the manager closes a paused VM's open connections while it runs first).
   */
  abandon(): void {
    if (this.gate.isHeld) this.gate.abandon();
    else this.gate.release();
    this.drop();
  }
}
