import type { EgressPolicy } from "../domain/network.js";
import type { SnapshotKind, SnapshotSource } from "../domain/snapshot.js";
import type { VolumeBinding } from "../domain/volume.js";
import type { Endpoint, PausePolicy } from "../transport/endpoint.js";
import type { Logger } from "pino";

/** What a runtime needs to start one sandbox. */
export interface InstanceSpec {
  sandboxId: string;
  templateId: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  /** The sandbox's own directory under the data dir (sockets, disk, logs). */
  dir: string;
  allowInternetAccess: boolean;
  /** Egress allow/deny lists (only given to a runtime whose egressUnsupported() says nothing). */
  egress?: EgressPolicy;
  /** Volumes to mount, each a host directory at a path inside (only given to a runtime whose volumesUnsupported() says nothing). */
  volumes?: VolumeBinding[];
  /**
   * Started ahead of time (the warm pool): run it at the lowest CPU priority
   * the runtime can give, so its start-up never slows real work; foreground()
   * restores it when a create claims it.
   */
  background?: boolean;
  /**
   * For a runtime that starts sandboxes from a checkpoint of a booted one
   * (gVisor's warm start): what makes the checkpointed sandbox ready for its
   * template (its start command, run through `endpoint` before the
   * checkpoint), and a key naming it. An instance restored from such a
   * checkpoint says so (Instance.warmedUp), and its template's processes run.
   */
  warmUp?: { key: string; run: (endpoint: Endpoint) => Promise<void> };
  log: Logger;
}

/**
 * Who a guest restored from another sandbox's memory must become: its kernel
 * still has its source's hostname and (with a network) address. The control
 * plane applies it inside, as root through envd, right after /init.
 */
export interface GuestIdentity {
  hostname: string;
  /** The guest's interface and its new address (`a.b.c.d/prefix`) and default gateway. */
  ipv4?: { device: string; address: string; gateway: string };
}

export interface InstanceStats {
  cpuCount: number;
  /** 0..100 over the last sampling interval */
  cpuUsedPct: number;
  memUsedBytes: number;
  memTotalBytes: number;
  diskUsedBytes: number;
  diskTotalBytes: number;
}

/**
 * A running (or paused) sandbox. Its envd is reached through `socketPath`, a
 * Unix socket that speaks the hybrid-vsock handshake (`CONNECT 49983\n` →
 * `OK <n>\n`, then bytes), for every runtime: the process runtime serves it
 * itself, QEMU through vhost-device-vsock, Firecracker through its vsock UDS.
 */
/** A volume the guest mounts itself once envd is up (a VM's virtio-fs tag and its path inside). */
export interface GuestVolume {
  tag: string;
  path: string;
}

export interface Instance {
  readonly sandboxId: string;
  readonly socketPath: string;
  /** JSON-safe data the store keeps so a restarted control plane can re-adopt this instance. */
  readonly persisted: Record<string, unknown>;
  /** envd's default user and workdir inside this instance (pushed through /init), if the runtime sets them. */
  readonly defaultUser?: string;
  readonly defaultWorkdir?: string;
  /**
   * What a pause does to the host's connections to envd (absent: `keep`):
   * `drop`, the pause ends the process that holds them (Firecracker's VMM), so
   * they are dropped before it and after the resume; `quiet`, the VM's vsock
   * must see no host traffic while paused (qemu with vhost-device-vsock), so
   * every write, dial and close waits for the resume. The manager acts on it
   * (the sandbox's Endpoint, transport/endpoint.ts).
   */
  readonly pauseConnections?: PausePolicy;
  /** Set on an instance restored from another sandbox's memory snapshot whose guest must be renamed and re-addressed. */
  readonly restoredGuest?: GuestIdentity;
  /** Volumes the manager mounts inside through envd (as root) before the sandbox is handed out (qemu's virtio-fs). */
  readonly guestVolumes?: GuestVolume[];
  /** Restored from a checkpoint taken after InstanceSpec.warmUp ran: the template's start command already runs. */
  readonly warmedUp?: boolean;
  /** How long envd may take to answer after create() (a VM under emulation boots slowly); default 30 s. */
  readonly readyTimeoutMs?: number;
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** Stops everything and removes the sandbox's runtime state; idempotent. */
  kill(): Promise<void>;
  alive(): Promise<boolean>;
  stats(): Promise<InstanceStats>;
  /**
   * The server is stopping, the instance keeps running: stop watching it and
   * let go of any control connection, so the next server can adopt it.
   */
  detach(): void;
  /** A background-started instance (InstanceSpec.background) is claimed: normal CPU priority from now on. */
  foreground?(): void;
  /** Called once if the instance dies on its own (crash, OOM, killed from outside). */
  onExit(listener: (reason: string) => void): void;
  /** Host memory the instance uses now (a VMM's resident set: guest RAM it touched plus its own), for metrics. */
  hostMemoryBytes?(): number;
  /** False while dialing the sandbox could harm it (a VM whose vsock device is not set up yet); absent: always fine. */
  vsockReady?(): boolean;
  /** Replaces the sandbox's egress rules (undefined: none); rejects when it has no network of its own to filter. */
  updateEgress(policy: EgressPolicy | undefined): Promise<void>;
  /** Console/agent log lines, newest last (for the logs endpoints). */
  logs(): Promise<{ timestamp: number; line: string }[]>;
  /** The snapshot kinds this instance can take; empty: none. */
  snapshotKinds(): SnapshotKind[];
  /**
   * Writes a consistent snapshot into `dest` (an empty directory the caller
   * owns and removes on failure). `paused` says the sandbox is paused now; a
   * running one is quiesced for the capture and left running afterwards.
   */
  snapshot(dest: string, opts: { kind: SnapshotKind; paused: boolean }): Promise<void>;
}

export interface Runtime {
  readonly name: string;
  /** Human-readable notes for start-up, e.g. isolation features this host lacks. */
  check(): Promise<string[]>;
  create(spec: InstanceSpec): Promise<Instance>;
  /** Why this runtime cannot enforce egress allow/deny lists here, or undefined when it can. */
  egressUnsupported(): Promise<string | undefined>;
  /** Why this runtime cannot mount volumes here (and what it would need), or undefined when it can. */
  volumesUnsupported(): Promise<string | undefined>;
  /** Re-attaches to an instance that outlived a control-plane restart, or undefined if it is gone. */
  adopt(sandboxId: string, dir: string, persisted: Record<string, unknown>, log: Logger): Promise<Instance | undefined>;
  /** The server stops: finish (or stop) background work of the runtime's own; its sandboxes keep running. */
  close?(): Promise<void>;
  /** Starts a new instance from a snapshot one of its instances took (a fresh id, its own copy of the files). */
  createFromSnapshot(spec: InstanceSpec, from: SnapshotSource): Promise<Instance>;
  /** At a server's start, after re-adoption: removes what sandboxes that are gone left on the host (e.g. empty cgroups). */
  removeLeftovers?(log: Logger): Promise<void>;
}
