/**
 * A host of a fleet (`locale2b node`) as the shared store knows it: where
 * API replicas reach it, whether it takes new sandboxes, and what it has
 * room for, as its last heartbeat said.
 */
export interface NodeRecord {
  /** Its --node-name: sandboxes' records carry it. */
  name: string;
  /** Where API replicas reach it (--advertise-url): http(s)://host:port. */
  url: string;
  /** `ready` takes creates; `cordoned` keeps its sandboxes and takes none (a drain). */
  state: "ready" | "cordoned";
  /** ms since epoch: its last heartbeat. A node silent for NODE_LOST_MS is lost. */
  heartbeatAt: number;
  startedAt: number;
  runtime: string;
  capacity: NodeCapacity;
  /** The template images it has (image keys: `base`, `@<build>`, ...): creates of other templates go elsewhere. */
  images: string[];
}

export interface NodeCapacity {
  maxSandboxes: number;
  memoryBudgetMB: number;
  /** vCPUs its sandboxes may be given together (--cpu-budget). Absent from an older node's record: not limited. */
  cpuBudget?: number;
  /** Sandboxes it has now (running or paused, or on their way). */
  sandboxes: number;
  /** Memory those sandboxes were given, MiB. */
  memoryMB: number;
  /** vCPUs those sandboxes were given (their cpuCount). */
  cpus?: number;
}

/** What a create needs of a node's room. */
export interface SandboxShape {
  memoryMB: number;
  cpuCount: number;
}

/** How often a node writes its heartbeat. */
export const NODE_HEARTBEAT_MS = 5_000;
/** A node whose heartbeat is older than this is lost: its sandboxes answer "lost with node X", creates go elsewhere. */
export const NODE_LOST_MS = 20_000;

/** Whether the node may take a create now (ready, alive, room for `shape`: a sandbox, its memory and its vCPUs). */
export function nodeTakes(n: NodeRecord, shape: SandboxShape, now = Date.now()): boolean {
  const c = n.capacity;
  return (
    n.state === "ready" &&
    now - n.heartbeatAt <= NODE_LOST_MS &&
    c.sandboxes < c.maxSandboxes &&
    c.memoryMB + shape.memoryMB <= c.memoryBudgetMB &&
    (c.cpuBudget === undefined || (c.cpus ?? 0) + shape.cpuCount <= c.cpuBudget)
  );
}
