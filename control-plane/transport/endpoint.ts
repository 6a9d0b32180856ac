// How the control plane reaches one sandbox: its envd and the ports of the
// servers in it. Everything above the runtimes (the manager, the proxy,
// sessions, the workspace API, activity watchers, metrics) holds an Endpoint,
// never a socket path: the transport owns the connections, their pooling, and
// what a pause does to them, so an endpoint can be a local hybrid-vsock socket
// (transport/local-endpoint.ts) or, in a fleet, another host.
import type http from "node:http";
import type http2 from "node:http2";
import type { Duplex } from "node:stream";

/**
 * What a pause does to the host's connections to a sandbox, as its runtime
 * says (Instance.pauseConnections):
 * - `keep`: nothing (the process runtime; gVisor paused in memory);
 * - `drop`: the pause ends the process that holds them (Firecracker's VMM, a
 *   gVisor checkpoint), so pooled connections are dropped before it and again
 *   after the resume;
 * - `quiet`: the VM's vsock must see no host traffic while it is stopped (QEMU
 *   with vhost-device-vsock): the control plane's own streams and idle
 *   connections are closed first, and every dial, write and close waits at the
 *   endpoint's gate until the resume (transport/hybrid-vsock.ts, VsockGate).
 */
export type PausePolicy = "keep" | "drop" | "quiet";

/** A VM the endpoint may run for a moment while it is paused (Endpoint.closeWhilePaused). */
export interface Pausable {
  pause(): Promise<void>;
  resume(): Promise<void>;
}

export interface Endpoint {
  readonly sandboxId: string;
  /**
   * Pooled keep-alive HTTP/1.1 connections to a port in the sandbox: envd's
   * (the default), or a server the user runs, through the guest's forwarder.
   */
  agent(port?: number): http.Agent;
  /**
   * The control plane's own requests to envd (/health, /init): a pool of
   * their own, so they never queue behind hundreds of user streams.
   */
  control(): http.Agent;
  /** A new connection to a port in the sandbox (a WebSocket tunnel); fails with the guest's reason. */
  dial(port: number): Promise<Duplex>;
  /** The multiplexed HTTP/2 session to envd (gRPC, Connect over h2c), made on first use. */
  h2(): Promise<http2.ClientHttp2Session>;
  /** Connections open now (pooled, HTTP/2, tunnels). */
  readonly liveCount: number;

  /** The pause policy at each step; the manager calls these and never looks at the runtime's kind. */
  beforePause(closeOwnStreams: () => Promise<void>): Promise<void>;
  /** The pause failed and the sandbox runs on: held traffic goes through. */
  pauseFailed(): void;
  afterResume(): void;
  /** A restarted control plane found the sandbox paused. */
  adoptedPaused(): void;
  /**
   * The control plane stops while a `quiet` sandbox is paused with
   * connections still open to it (a stream kept across the pause). Closing
   * them with the VM stopped would break its vsock for good, so it runs for a
   * moment, they are closed, and it stops again. True when it did that.
   */
  closeWhilePaused(vm: Pausable): Promise<boolean>;
  /** The pooled connections are dead (a memory snapshot closed them): the next request dials anew. */
  drop(): void;
}
