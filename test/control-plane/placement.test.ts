// Where a fleet's API places creates (control-plane/fleet/placement.ts),
// over 100 simulated nodes (node records as their heartbeats write them):
// spread by load, never on cordoned, lost or full nodes (sandboxes, memory
// or vCPUs), only where the template's image or the snapshot's files are;
// 429 (full) vs 503 (none).
import { describe, expect, it } from "vitest";
import { NODE_LOST_MS, type NodeRecord } from "../../control-plane/domain/node.js";
import { PendingPlacements, place, type PlacementAsk } from "../../control-plane/fleet/placement.js";

const NOW = 1_800_000_000_000;

function node(i: number, over: Partial<NodeRecord> = {}, cap: Partial<NodeRecord["capacity"]> = {}): NodeRecord {
  return {
    name: `node-${String(i).padStart(3, "0")}`,
    url: `http://10.0.${i >> 8}.${i & 255}:3000`,
    state: "ready",
    heartbeatAt: NOW - 1000,
    startedAt: NOW - 3_600_000,
    runtime: "process",
    capacity: { maxSandboxes: 100, memoryBudgetMB: 64 * 1024, sandboxes: 0, memoryMB: 0, ...cap },
    images: ["base"],
    ...over,
  };
}

/** Places `count` creates one after another as one replica does (its placements counted until a heartbeat). */
function burst(nodes: NodeRecord[], count: number, ask: PlacementAsk = { memoryMB: 512, cpuCount: 2 }): Map<string, number> {
  const pending = new PendingPlacements();
  const got = new Map<string, number>();
  for (let i = 0; i < count; i++) {
    const p = place(pending.apply(nodes), ask, NOW);
    if (!p.ok) throw new Error(p.message);
    const chosen = p.nodes[0]!;
    pending.note(chosen.name, ask, NOW);
    got.set(chosen.name, (got.get(chosen.name) ?? 0) + 1);
  }
  return got;
}

describe("placement over 100 nodes", () => {
  it("spreads a burst of 1000 creates evenly, and fills the emptier nodes first", () => {
    const nodes = Array.from({ length: 100 }, (_, i) => node(i));
    const even = burst(nodes, 1000);
    expect(even.size).toBe(100);
    expect(Math.max(...even.values()) - Math.min(...even.values())).toBeLessThanOrEqual(1);

    // Half the nodes already hold 50 sandboxes: the next 2500 creates go to the other half until they catch up.
    const uneven = nodes.map((n, i) => (i % 2 ? { ...n, capacity: { ...n.capacity, sandboxes: 50, memoryMB: 50 * 512 } } : n));
    const fill = burst(uneven, 2500);
    for (const [name, count] of fill) expect(Number(name.slice(5)) % 2, `${name} got ${count}`).toBe(0);
  });

  it("spreads one-at-a-time creates (each killed before the next) over equal nodes instead of always the first by name", () => {
    const nodes = Array.from({ length: 4 }, (_, i) => node(i));
    const got = new Map<string, number>();
    for (let i = 0; i < 400; i++) {
      const p = place(nodes, { memoryMB: 512, cpuCount: 2 }, NOW); // the last sandbox is gone again: every node looks the same
      if (!p.ok) throw new Error(p.message);
      got.set(p.nodes[0]!.name, (got.get(p.nodes[0]!.name) ?? 0) + 1);
    }
    expect(got.size).toBe(4);
    for (const [name, count] of got) expect(count, `${name} got ${count} of 400`).toBeGreaterThan(40);
  });

  it("never places on cordoned, lost or full nodes, and counts memory as well as sandboxes", () => {
    const nodes = Array.from({ length: 100 }, (_, i) => {
      if (i < 30) return node(i, { state: "cordoned" });
      if (i < 60) return node(i, { heartbeatAt: NOW - NODE_LOST_MS - 1 });
      if (i < 90) return node(i, {}, { sandboxes: 100 });
      if (i < 95) return node(i, {}, { memoryMB: 64 * 1024 - 256 }); // room for a 256 MiB sandbox, not 512
      return node(i);
    });
    const got = burst(nodes, 50);
    expect([...got.keys()].sort()).toEqual(["node-095", "node-096", "node-097", "node-098", "node-099"]);
    // Without the empty five: a 256 MiB sandbox fits the nearly full ones (one each), a 512 MiB one fits none.
    const tight = nodes.slice(0, 95);
    expect([...burst(tight, 5, { memoryMB: 256, cpuCount: 2 }).keys()].sort()).toEqual(["node-090", "node-091", "node-092", "node-093", "node-094"]);
    expect(place(tight, { memoryMB: 512, cpuCount: 2 }, NOW)).toMatchObject({ ok: false, why: "full" });
  });

  it("puts a template's creates on nodes with its image first, others when those are full, and a snapshot's on its node", () => {
    const nodes = Array.from({ length: 100 }, (_, i) => node(i, i % 10 === 3 ? { images: ["base", "@build-7"] } : {}));
    const holders = nodes.filter((_, i) => i % 10 === 3).map((n) => n.name);
    const built = burst(nodes, 100, { memoryMB: 512, cpuCount: 2, image: "@build-7" });
    expect([...built.keys()].sort()).toEqual(holders);
    // The holders full: the next create goes to another node (which copies the image).
    const full = nodes.map((n, i) => (i % 10 === 3 ? { ...n, capacity: { ...n.capacity, sandboxes: 100 } } : n));
    const p = place(full, { memoryMB: 512, cpuCount: 2, image: "@build-7" }, NOW);
    expect(p.ok && holders.includes(p.nodes[0]!.name)).toBe(false);
    const s = place(nodes, { memoryMB: 512, cpuCount: 2, node: "node-042" }, NOW);
    expect(s.ok && s.nodes.map((n) => n.name)).toEqual(["node-042"]);
  });

  it("answers 'full' (429 with Retry-After) when nodes could take it but have no room, 'none' (503) when none could", () => {
    const full = Array.from({ length: 100 }, (_, i) => node(i, {}, { sandboxes: 100 }));
    const a = place(full, { memoryMB: 512, cpuCount: 2 }, NOW);
    expect(a).toMatchObject({ ok: false, why: "full" });
    expect(!a.ok && a.message).toMatch(/the fleet is full: 100 nodes could take this sandbox and none has room for one more sandbox of 512 MiB and 2 vCPUs/);

    const b = place(Array.from({ length: 100 }, (_, i) => node(i, { state: "cordoned" })), { memoryMB: 512, cpuCount: 2 }, NOW);
    expect(b).toMatchObject({ ok: false, why: "none" });
    expect(!b.ok && b.message).toMatch(/100 live nodes, none ready for it/);

    const c = place(Array.from({ length: 100 }, (_, i) => node(i, { heartbeatAt: NOW - 60_000 })), { memoryMB: 512, cpuCount: 2 }, NOW);
    expect(!c.ok && c.message).toMatch(/no node has sent a heartbeat in the last 20 s/);

    const d = place(Array.from({ length: 100 }, (_, i) => node(i)), { memoryMB: 512, cpuCount: 2, image: "@gone" }, NOW);
    expect(!d.ok && d.message).toMatch(/its template's image '@gone' is on no live node \(the node that built it is gone\): build the template again/);
  });

  it("forgets this replica's placements once a node's heartbeat counts them", () => {
    const pending = new PendingPlacements();
    const nodes = [node(1), node(2)];
    pending.note("node-001", { memoryMB: 512, cpuCount: 2 }, NOW);
    pending.note("node-001", { memoryMB: 512, cpuCount: 2 }, NOW);
    expect(pending.apply(nodes)[0]!.capacity.sandboxes).toBe(2);
    // node-001's next heartbeat comes after those creates: it counts them itself.
    const later = [node(1, { heartbeatAt: NOW + 5000 }, { sandboxes: 2, memoryMB: 1024 }), node(2)];
    expect(pending.apply(later)[0]!.capacity.sandboxes).toBe(2);
    expect(nodes[0]!.capacity.sandboxes).toBe(0); // the input is left alone
  });

  it("counts vCPUs against each node's CPU budget: a node with memory to spare but no vCPUs takes none; an older node's record without a budget is not limited", () => {
    const nodes = Array.from({ length: 10 }, (_, i) => {
      if (i < 4) return node(i, {}, { cpuBudget: 64, cpus: 63 }); // room for 1 vCPU, not 2
      if (i < 8) return node(i, {}, { cpuBudget: 64, cpus: 0 });
      return node(i); // no cpuBudget: a node from before CPU budgets
    });
    const got = burst(nodes, 40);
    expect([...got.keys()].sort()).toEqual(["node-004", "node-005", "node-006", "node-007", "node-008", "node-009"]);
    // A 1-vCPU sandbox fits the nearly full ones too.
    expect([...burst(nodes.slice(0, 4), 4, { memoryMB: 512, cpuCount: 1 }).keys()].sort()).toEqual(["node-000", "node-001", "node-002", "node-003"]);
    const full = place(nodes.slice(0, 4), { memoryMB: 512, cpuCount: 2 }, NOW);
    expect(full).toMatchObject({ ok: false, why: "full" });
    // vCPUs weigh in the load: half the vCPUs given is more loaded than 10 of 100 sandboxes.
    const [busy, idle] = [node(1, {}, { cpuBudget: 64, cpus: 32, sandboxes: 10 }), node(2, {}, { cpuBudget: 64, cpus: 8, sandboxes: 10 })];
    const p = place([busy, idle], { memoryMB: 512, cpuCount: 2 }, NOW);
    expect(p.ok && p.nodes.map((n) => n.name)).toEqual(["node-002", "node-001"]);
    // This replica's own placements count their vCPUs until a heartbeat does.
    const pending = new PendingPlacements();
    pending.note("node-002", { memoryMB: 512, cpuCount: 4 }, NOW);
    expect(pending.apply([idle])[0]!.capacity.cpus).toBe(12);
  });
});
