import type { SandboxNetwork } from "./network.js";
import type { SnapshotSource } from "./snapshot.js";
import type { SandboxBoot } from "./template.js";
import type { VolumeMount } from "./volume.js";

/**
 * The control plane's domain: a sandbox record as the store keeps it and the
 * manager hands it to the API surfaces (REST, Connect, proxy, CLI).
 */
export type SandboxState = "creating" | "running" | "pausing" | "paused" | "resuming" | "killed";

/** Every state but `killed`: what a list shows unless asked for others. */
export const LIVE_STATES: readonly SandboxState[] = ["creating", "running", "pausing", "paused", "resuming"];

/** A sandbox's shape when neither the create nor its template says otherwise (E2B's defaults: 2 vCPUs, 512 MiB). */
export const DEFAULT_SANDBOX_SHAPE = { cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 } as const;

export type TimeoutAction = "kill" | "pause";

export interface SandboxRecord {
  /** Lowercase alphanumerics only (`-` would break `<port>-<id>.<domain>` hosts). */
  id: string;
  /** The template's id as the API shows it (E2B's templateID). */
  templateId: string;
  alias?: string;
  /** What it boots (absent in records from before templates had builds: the image is `templateId`). */
  boot?: SandboxBoot;
  state: SandboxState;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  /** ms since epoch */
  startedAt: number;
  /** ms since epoch: when the timeout acts (kill, or pause with autoPause). */
  endAt: number;
  onTimeout: TimeoutAction;
  autoResume: boolean;
  /** false: the timeout's pause keeps files only (E2B's autoPauseMemory: false). Absent: true. */
  pauseMemory?: boolean;
  envdVersion: string;
  /** The envd access token (X-Access-Token), pushed to envd through /init. */
  envdAccessToken: string;
  trafficAccessToken: string;
  allowInternetAccess: boolean;
  /** E2B's network config as the create asked for it (allowOut/denyOut as PUT /network last set them), returned by getInfo. */
  network?: SandboxNetwork;
  runtime: string;
  /** The host it runs on, in a fleet (`locale2b node --name`); absent on one box (`serve`). */
  node?: string;
  /** What the runtime needs to re-adopt the instance after a restart (pid, socket path, ...). */
  runtimeData: Record<string, unknown>;
  /** Set when state is `killed`: why (killed, timeout, died, ...). */
  endReason?: string;
  /** Volumes mounted in it (E2B's volumeMounts: by name, at a path inside). */
  volumeMounts?: VolumeMount[];
}

export type LifecycleEventType = "created" | "paused" | "resumed" | "killed" | "timed_out";

export interface LifecycleEvent {
  type: LifecycleEventType;
  sandbox: SandboxRecord;
  /** ms since epoch */
  time: number;
}

export interface CreateSandboxInput {
  templateId: string;
  /** seconds */
  timeout: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  autoPause?: boolean;
  /** false: a filesystem-only auto-pause. */
  autoPauseMemory?: boolean;
  autoResume?: boolean;
  allowInternetAccess?: boolean;
  network?: SandboxNetwork;
  cpuCount?: number;
  memoryMB?: number;
  /** The disk's size (a snapshot's image has its own); absent: the server's default. */
  diskSizeMB?: number;
  /** Start on a snapshot's files (its runtime's createFromSnapshot) instead of the template's fresh ones. */
  fromSnapshot?: SnapshotSource;
  /** What the sandbox boots, already known (a snapshot's or a fork's parent's): `templateId` is not resolved again. */
  boot?: SandboxBoot;
  /** The name the template was asked for by (set by the manager from `templateId`). */
  alias?: string;
  /** Volumes to mount (by name, at a path inside). */
  volumeMounts?: VolumeMount[];
}

export interface ListFilter {
  /** Empty or absent: every state but `killed`. */
  states?: SandboxState[];
  /** Every pair must match. */
  metadata?: Record<string, string>;
  templateId?: string;
  startedAfter?: number;
  /** Only the sandboxes of this node (a fleet). */
  node?: string;
}

/** Does `rec` pass `filter` (the stores' listSandboxes, in memory)? */
export function matchesFilter(rec: SandboxRecord, filter: ListFilter): boolean {
  const states = filter.states?.length ? filter.states : LIVE_STATES;
  if (!states.includes(rec.state)) return false;
  if (filter.templateId && rec.templateId !== filter.templateId) return false;
  if (filter.startedAfter !== undefined && rec.startedAt < filter.startedAfter) return false;
  if (filter.node !== undefined && rec.node !== filter.node) return false;
  return Object.entries(filter.metadata ?? {}).every(([k, v]) => rec.metadata[k] === v);
}

/** The order lists come in: started first, then by id. */
export function byStart(a: SandboxRecord, b: SandboxRecord): number {
  return a.startedAt - b.startedAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}
