// Where a create goes in a fleet: a ready, live node with room for it (and
// the template's image, when only some nodes have it), the least loaded
// first, so creates spread across nodes.
import { NODE_LOST_MS, nodeTakes, type NodeRecord } from "../domain/node.js";

export interface PlacementAsk {
  memoryMB: number;
  /** vCPUs (the template's cpuCount). */
  cpuCount: number;
  /** The template's image (a Template SDK build): nodes that have it first; the others copy it. */
  image?: string;
  /** Only this node (a snapshot's files are there). */
  node?: string;
}

export type Placement =
  | { ok: true; nodes: NodeRecord[] }
  /** `full`: live nodes exist, none has room (429 with Retry-After); `none`: no node can take it at all (503). */
  | { ok: false; why: "full" | "none"; message: string };

/** How loaded a node is: the largest of its sandbox count, its memory and its vCPUs, each against its limit. */
function load(n: NodeRecord): number {
  const c = n.capacity;
  const cpu = c.cpuBudget === undefined ? 0 : (c.cpus ?? 0) / Math.max(1, c.cpuBudget);
  return Math.max(c.sandboxes / Math.max(1, c.maxSandboxes), c.memoryMB / Math.max(1, c.memoryBudgetMB), cpu);
}

/**
 * The nodes that may take the create, best first: those that have the
 * template's image (least loaded, then fewest sandboxes, then in a random order), then
 * the others, which copy the image from a holder first (fleet/image-transfer.ts);
 * or why none may.
 */
export function place(nodes: NodeRecord[], ask: PlacementAsk, now = Date.now(), random: () => number = Math.random): Placement {
  const alive = nodes.filter((n) => now - n.heartbeatAt <= NODE_LOST_MS);
  if (ask.image !== undefined && !alive.some((n) => n.images.includes(ask.image!))) {
    return { ok: false, why: "none", message: `no node can take this sandbox: its template's image '${ask.image}' is on no live node (the node that built it is gone): build the template again` };
  }
  const eligible = alive.filter((n) => n.state === "ready" && (ask.node === undefined || n.name === ask.node));
  const withRoom = eligible.filter((n) => nodeTakes(n, ask, now));
  if (withRoom.length) {
    const has = (n: NodeRecord) => (ask.image === undefined || n.images.includes(ask.image) ? 0 : 1);
    // Equal nodes are taken in a random order: by name, a client that creates, uses and kills one sandbox at a
    // time (E2B's own test suites, many agents) would land on the same node every time.
    const tie = new Map(withRoom.map((n) => [n.name, random()]));
    return { ok: true, nodes: withRoom.sort((a, b) => has(a) - has(b) || load(a) - load(b) || a.capacity.sandboxes - b.capacity.sandboxes || tie.get(a.name)! - tie.get(b.name)!) };
  }
  if (eligible.length) {
    return { ok: false, why: "full", message: `the fleet is full: ${eligible.length} node${eligible.length > 1 ? "s" : ""} could take this sandbox and none has room for one more sandbox of ${ask.memoryMB} MiB and ${ask.cpuCount} vCPU${ask.cpuCount === 1 ? "" : "s"}; retry later, or kill or pause some sandboxes` };
  }
  const where = ask.node !== undefined ? `node '${ask.node}' (where its snapshot or volumes are)` : "a node";
  const why = alive.length === 0 ? `no node has sent a heartbeat in the last ${NODE_LOST_MS / 1000} s` : `${alive.length} live node${alive.length > 1 ? "s" : ""}, none ready for it (cordoned${ask.node !== undefined ? ", or not that node" : ""})`;
  return { ok: false, why: "none", message: `no node can take this sandbox: it needs ${where}; ${why}` };
}

/**
 * Creates this replica placed that the nodes' heartbeats do not count yet
 * (a heartbeat comes every few seconds): counted in before the next
 * placement, so a burst of creates spreads instead of piling onto the node
 * that looked least loaded.
 */
export class PendingPlacements {
  private readonly placed = new Map<string, { at: number; memoryMB: number; cpuCount: number }[]>();

  note(node: string, shape: { memoryMB: number; cpuCount: number }, at = Date.now()): void {
    const list = this.placed.get(node) ?? [];
    list.push({ at, memoryMB: shape.memoryMB, cpuCount: shape.cpuCount });
    this.placed.set(node, list);
  }

  /**
   * The nodes with this replica's placements since each one's heartbeat (and
   * since `since`, when the counts come from elsewhere) added in (copies; the
   * input is left alone).
   */
  apply(nodes: NodeRecord[], since = 0): NodeRecord[] {
    return nodes.map((n) => {
      const list = (this.placed.get(n.name) ?? []).filter((p) => p.at >= Math.max(n.heartbeatAt, since));
      if (list.length) this.placed.set(n.name, list);
      else this.placed.delete(n.name);
      if (!list.length) return n;
      const memoryMB = list.reduce((sum, p) => sum + p.memoryMB, 0);
      const cpus = list.reduce((sum, p) => sum + p.cpuCount, 0);
      return { ...n, capacity: { ...n.capacity, sandboxes: n.capacity.sandboxes + list.length, memoryMB: n.capacity.memoryMB + memoryMB, cpus: (n.capacity.cpus ?? 0) + cpus } };
    });
  }
}
