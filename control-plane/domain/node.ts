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
  /** Sandboxes it has now (running or paused, or on their way). */
  sandboxes: number;
  /** Memory those sandboxes were given, MiB. */
  memoryMB: number;
}

/** How often a node writes its heartbeat. */
export const NODE_HEARTBEAT_MS = 5_000;
/** A node whose heartbeat is older than this is lost: its sandboxes answer "lost with node X", creates go elsewhere. */
export const NODE_LOST_MS = 20_000;

/** Whether the node may take a create now (ready, alive, room for `memoryMB` more). */
export function nodeTakes(n: NodeRecord, memoryMB: number, now = Date.now()): boolean {
  return (
    n.state === "ready" &&
    now - n.heartbeatAt <= NODE_LOST_MS &&
    n.capacity.sandboxes < n.capacity.maxSandboxes &&
    n.capacity.memoryMB + memoryMB <= n.capacity.memoryBudgetMB
  );
}
