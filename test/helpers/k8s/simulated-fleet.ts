// A fleet of simulated nodes as API replicas see it in Kubernetes, for placement tests at scale: each node
// has a record in the store (capacity, images; a heartbeat every NODE_HEARTBEAT_MS, as NodeAgent writes
// it) and a Lease renewed by the project's NodeLease, as the node agent keeps it. No node runs a sandbox:
// a create is a sandbox record on the chosen node, which the store's nodeLoads then counts, as it counts a
// real create from the moment it starts.
import type { Logger } from "pino";
import { NODE_HEARTBEAT_MS, type NodeRecord } from "../../../control-plane/domain/node.js";
import type { SandboxRecord } from "../../../control-plane/domain/sandbox.js";
import type { InCluster } from "../../../control-plane/fleet/kubernetes-client.js";
import { NodeLease } from "../../../control-plane/fleet/kubernetes-lease.js";
import type { KubernetesNodes } from "../../../control-plane/fleet/kubernetes-nodes.js";
import { place, type PlacementAsk } from "../../../control-plane/fleet/placement.js";
import type { Store } from "../../../control-plane/store/store.js";

export function nodeRecord(name: string, i: number, capacity: Partial<NodeRecord["capacity"]> = {}, now = Date.now()): NodeRecord {
  return {
    name,
    url: `http://10.99.${i >> 8}.${i & 255}:3001`, // never dialled: placement only reads the records
    state: "ready",
    heartbeatAt: now,
    startedAt: now,
    runtime: "process",
    capacity: { maxSandboxes: 100, memoryBudgetMB: 64 * 1024, sandboxes: 0, memoryMB: 0, ...capacity },
    images: ["base"],
  };
}

function sandboxRecord(id: string, node: string, memoryMB: number, now = Date.now()): SandboxRecord {
  return {
    id,
    templateId: "base",
    state: "running",
    metadata: {},
    envVars: {},
    cpuCount: 1,
    memoryMB,
    diskSizeMB: 1024,
    startedAt: now,
    endAt: now + 3_600_000,
    onTimeout: "kill",
    autoResume: false,
    envdVersion: "0.5.0",
    envdAccessToken: "",
    trafficAccessToken: "",
    allowInternetAccess: true,
    runtime: "process",
    node,
    runtimeData: {},
  };
}

export class SimulatedFleet {
  readonly records = new Map<string, NodeRecord>();
  private readonly leases = new Map<string, NodeLease>();
  /** Nodes whose store heartbeats go on. */
  private readonly beating = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private beat: Promise<void> = Promise.resolve();
  private seq = 0;

  constructor(private readonly o: { store: Store; cluster: InCluster; nodes: KubernetesNodes; log: Logger }) {}

  /** Writes the records and starts every node's heartbeats and Lease (created at its first renewal). */
  async start(records: NodeRecord[]): Promise<void> {
    for (const r of records) {
      this.records.set(r.name, r);
      this.beating.add(r.name);
      this.leases.set(r.name, new NodeLease({ cluster: this.o.cluster, node: r.name, holder: `locale2b-node-${r.name}`, log: this.o.log }));
    }
    await this.heartbeat();
    await Promise.all([...this.leases.values()].map((l) => l.start()));
    this.timer = setInterval(() => void this.heartbeat(), NODE_HEARTBEAT_MS);
    this.timer.unref();
  }

  private heartbeat(): Promise<void> {
    this.beat = this.beat.then(async () => {
      const now = Date.now();
      await Promise.all([...this.beating].map((n) => this.o.store.putNode({ ...this.records.get(n)!, heartbeatAt: now })));
    });
    return this.beat;
  }

  /** A node's next heartbeats report other capacity (e.g. a lower --max-sandboxes); written at once. */
  async setCapacity(name: string, capacity: Partial<NodeRecord["capacity"]>): Promise<void> {
    const r = this.records.get(name)!;
    this.records.set(name, { ...r, capacity: { ...r.capacity, ...capacity } });
    await this.o.store.putNode({ ...this.records.get(name)!, heartbeatAt: Date.now() });
  }

  /** The node agent stops renewing its Lease (lost its API access, or died), and, unless `heartbeats`, its store heartbeats too. */
  async silence(names: string[], opts: { heartbeats: boolean }): Promise<void> {
    await Promise.all(names.map((n) => this.leases.get(n)!.stop()));
    if (!opts.heartbeats) for (const n of names) this.beating.delete(n);
  }

  /** The nodes as a replica places over them: the records judged by Kubernetes, the loads counted afresh (api-server.ts). */
  async forPlacement(): Promise<NodeRecord[]> {
    const [records, loads] = await Promise.all([this.o.store.listNodes(), this.o.store.nodeLoads()]);
    const byNode = new Map(loads.map((l) => [l.node, l]));
    return this.o.nodes.view(records).map((n) => {
      const l = byNode.get(n.name) ?? { sandboxes: 0, memoryMB: 0, cpus: 0 };
      return { ...n, capacity: { ...n.capacity, sandboxes: l.sandboxes, memoryMB: l.memoryMB, cpus: l.cpus } };
    });
  }

  /** `count` creates one after another, each on the first node `place` gives; how many each node got. */
  async create(count: number, ask: PlacementAsk = { memoryMB: 512, cpuCount: 2 }): Promise<Map<string, number>> {
    const got = new Map<string, number>();
    for (let i = 0; i < count; i++) {
      const p = place(await this.forPlacement(), ask);
      if (!p.ok) throw new Error(`create ${i + 1} of ${count}: ${p.message}`);
      const node = p.nodes[0]!.name;
      await this.o.store.putSandbox(sandboxRecord(`kwok${++this.seq}`, node, ask.memoryMB));
      got.set(node, (got.get(node) ?? 0) + 1);
    }
    return got;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.all([...this.leases.values()].map((l) => l.stop()));
    await this.beat;
  }
}
