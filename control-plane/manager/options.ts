// What a SandboxManager is made of: the server's store, runtimes, transport,
// limits and the hooks other parts of the control plane give it.
import { availableParallelism, totalmem } from "node:os";
import type { Logger } from "pino";
import type { GuestIdentity, GuestVolume, Runtime } from "../runtimes/runtime.js";
import type { RuntimeSet } from "../runtimes/runtime-set.js";
import type { Store } from "../store/store.js";
import type { EnvdClient } from "../transport/envd-client.js";
import type { EnvdTarget } from "../transport/envd-rpc.js";
import type { Transport } from "../transport/transport.js";
import type { AdmissionLimits } from "./admission.js";
import type { SandboxBoot } from "../domain/template.js";
import type { VolumeBinding, VolumeMount } from "../domain/volume.js";

export interface ManagerLimits {
  /** Sandboxes that may exist at once (running or paused). */
  maxSandboxes: number;
  /** Sum of memoryMB over existing sandboxes. */
  memoryBudgetMB: number;
  /** Sum of cpuCount (vCPUs) over existing sandboxes. */
  cpuBudget: number;
  /** Longest timeout a client may ask for, in seconds. */
  maxTimeoutSeconds: number;
}

/**
 * Defaults: a sandbox's memoryMB is a limit, and an idle one uses ~20 MiB
 * (bench: `npm run bench -- sandboxes`), so the budget overcommits the host's
 * RAM 16x. Its cpuCount is a ceiling (a CPU quota), and an agent's sandbox is
 * idle most of the time, so the CPU budget overcommits the host's cores 64x
 * (at least 256 vCPUs: 128 sandboxes of E2B's default 2). --memory-budget-mb,
 * --cpu-budget and --max-sandboxes set them.
 */
export const DEFAULT_LIMITS: ManagerLimits = {
  maxSandboxes: 1000,
  memoryBudgetMB: Math.max(64 * 1024, Math.floor((totalmem() / 1024 / 1024) * 16)),
  cpuBudget: Math.max(256, availableParallelism() * 64),
  maxTimeoutSeconds: 24 * 3600,
};

/** A create's template reference (an id, a name, `name:tag`), resolved. */
export interface ResolvedTemplate {
  /** E2B's templateID of the sandbox. */
  templateId: string;
  alias?: string;
  boot: SandboxBoot;
  /** The template's defaults for its sandboxes (its build's request). */
  cpuCount?: number;
  memoryMB?: number;
}

export interface TemplateResolver {
  resolve(ref: string): Promise<ResolvedTemplate | undefined>;
  /** What a create may name, for the error an unknown one gets. */
  names(): Promise<string[]>;
  /** Why a template that is not there yet will be (a built-in being built for its first use), if so. */
  pending?(ref: string): string | undefined;
}

/**
 * A new sandbox's template start command, run once its envd answers and
 * /init is done; resolves once its ready command succeeded (or at once when
 * the template has neither).
 */
export type StartCommand = (target: EnvdTarget, boot: SandboxBoot | undefined) => Promise<void>;

export interface ManagerOptions {
  store: Store;
  /** This host's name in a fleet: its sandboxes' records carry it, and only they are adopted at start. */
  node?: string;
  /** The server's default runtime. */
  runtime: Runtime;
  /** All runtimes, when templates may pick theirs (default: only `runtime`). */
  runtimes?: RuntimeSet;
  /** How sandboxes' envds are reached: one endpoint per sandbox. */
  transport: Transport;
  envd: EnvdClient;
  dataDir: string;
  /** Secret the per-sandbox envd and traffic tokens are derived from. */
  seed: Buffer;
  limits: ManagerLimits;
  /** The templates sandboxes can be created from. */
  templates: TemplateResolver;
  defaults: { cpuCount: number; memoryMB: number; diskSizeMB: number };
  readyTimeoutMs: number;
  /** Sandbox starts at once and starts that may wait (default: one per CPU, 16 waiting per CPU). */
  admission?: AdmissionLimits;
  /** Sandboxes of the default shape kept started ahead of creates (default 0: none). */
  warmPool?: number;
  /** Sandboxes kept started ahead of creates for each other template with a start command created lately (default 0). */
  templateWarmPool?: number;
  /**
   * Runs once a new sandbox's envd answers (for a warm sandbox: while it is
   * made, ahead of any create; else before the create is answered). `token`
   * is envd's access token, "" before /init set one. The workspace API makes
   * /workspace there. `guest`: a guest restored from another sandbox's
   * memory that must be renamed and re-addressed first; throws only when
   * that fails (the create fails then).
   */
  prepare?: (target: EnvdTarget, dir: string, guest?: GuestIdentity) => Promise<void>;
  /**
   * Makes a sandbox with request rules (network.rules) trust the egress
   * proxy's CA (egress-trust.ts), at create and when an update gives it
   * rules; throws when it cannot (the create or update fails). Absent: such
   * sandboxes are refused.
   */
  trustEgressCa?: (target: EnvdTarget) => Promise<void>;
  /** Mounts the volumes a VM mounts itself (Instance.guestVolumes) through envd; throws when it cannot. */
  mountGuestVolumes?: (target: EnvdTarget, volumes: GuestVolume[]) => Promise<void>;
  /** Runs a new sandbox's template start and ready commands (templates/start-command.ts); absent: they are not run. */
  startCommand?: StartCommand;
  /**
   * Before a sandbox whose vsock must stay quiet while paused (qemu) is
   * paused: close the control plane's own long-lived streams to it (activity
   * watch, sessions) while it still runs. They reopen on its resume.
   */
  quiesce?: (sandboxId: string) => Promise<void>;
  /** A fleet node: makes sure a template's image is on this host before a create boots it (copied from another node). */
  ensureImage?: (image: string) => Promise<void>;
  /** Volumes (E2B's volumeMounts): absent, a create that asks for one is refused. */
  volumes?: VolumeLeases;
  log: Logger;
}

/** What the manager needs of the volumes: a create's mounts checked, turned into host paths, and held while it starts. */
export interface VolumeLeases {
  acquire(mounts: VolumeMount[]): Promise<{ bindings: VolumeBinding[]; release(): void }>;
}
