// How an API replica in Kubernetes sees the fleet's nodes: their records in
// the store say where each node is and what it has room for; Kubernetes says
// whether it is alive and may take creates. A node is alive while its Lease
// (kubernetes-lease.ts) is renewed, and takes creates only while its Node is
// Ready, not cordoned (`kubectl cordon`) and not labelled
// `locale2b.dev/sandboxes=false` (no new sandboxes there, while pods still
// schedule and its sandboxes keep running). The fleet's Leases and the
// cluster's Nodes are watched (kubernetes-watch.ts): a cordon, a Node gone
// NotReady or a Lease renewal counts from the event, not from a poll. A
// small read every heartbeat checks that the apiserver still answers: when
// it has not for a while, the nodes' own heartbeats in the store stand in
// (an apiserver outage must not make every node look lost); the Nodes last
// seen cordoned or not Ready stay out.
import type { Logger } from "pino";
import { NODE_HEARTBEAT_MS, NODE_LOST_MS, type NodeRecord } from "../domain/node.js";
import { kubeGet, type InCluster } from "./kubernetes-client.js";
import { LEASE_LABEL, leasesPath } from "./kubernetes-lease.js";
import { KubeCollection, type KubeCollectionStats, type KubeObject } from "./kubernetes-watch.js";
import { Periodic } from "./periodic.js";

interface Lease extends KubeObject {
  spec?: { renewTime?: string };
}
interface Node extends KubeObject {
  spec?: { unschedulable?: boolean };
  status?: { conditions?: { type?: string; status?: string }[] };
}

/**
 * The Node label that takes a node out of placement without a cordon: `kubectl label node X
 * locale2b.dev/sandboxes=false` keeps new sandboxes off it while other pods still schedule there
 * (a cordon stops both), and its sandboxes keep being served. Any other value, or none: it takes creates.
 */
export const SANDBOXES_LABEL = "locale2b.dev/sandboxes";

export interface KubernetesNodesOptions {
  cluster: InCluster;
  log: Logger;
  everyMs?: number;
}

export class KubernetesNodes {
  private readonly leases: KubeCollection<Lease>;
  private readonly nodes: KubeCollection<Node>;
  /** Fleet node name → its Lease's last renewal (ms since epoch); rebuilt from `leases` after a change. */
  private renewedCache: Map<string, number> | undefined;
  /** Kubernetes Node name → why it takes no creates ("" when it does); rebuilt from `nodes` after a change. */
  private unschedulableCache: Map<string, string> | undefined;
  private readAt = 0;
  private failing = false;
  private readonly every: Periodic;

  constructor(private readonly o: KubernetesNodesOptions) {
    const { cluster, log } = o;
    const relistMs = o.everyMs ?? NODE_HEARTBEAT_MS;
    this.leases = new KubeCollection<Lease>({
      cluster,
      path: leasesPath(cluster.namespace),
      query: `labelSelector=${encodeURIComponent(LEASE_LABEL)}`,
      what: "the fleet's Leases",
      log,
      relistMs,
      onChange: () => (this.renewedCache = undefined),
    });
    this.nodes = new KubeCollection<Node>({ cluster, path: "/api/v1/nodes", what: "the cluster's Nodes", log, relistMs, onChange: () => (this.unschedulableCache = undefined) });
    this.every = new Periodic(() => this.probe(), relistMs);
  }

  /** Whether the apiserver answered recently enough to judge by it (else the store's heartbeats do). */
  current(now = Date.now()): boolean {
    return now - this.readAt <= NODE_LOST_MS / 2;
  }

  /** What a lost node's message says is missing. */
  silence(): string {
    return this.current() ? "no Lease renewal" : "no heartbeat";
  }

  /** Lists, events and watches so far, of the Leases and of the Nodes. */
  watchStats(): { leases: KubeCollectionStats; nodes: KubeCollectionStats } {
    return { leases: { ...this.leases.stats }, nodes: { ...this.nodes.stats } };
  }

  /** Asks the apiserver once whether it answers (a failure is logged once until an answer comes again). */
  refresh(): Promise<void> {
    return this.every.run();
  }

  private async probe(): Promise<void> {
    const { cluster, log } = this.o;
    try {
      // One Lease, read from etcd: the apiserver and its storage answer (the watches bring the changes).
      await kubeGet(cluster, `${leasesPath(cluster.namespace)}?labelSelector=${encodeURIComponent(LEASE_LABEL)}&limit=1`, "read the fleet's Leases");
      if (!this.leases.synced || !this.nodes.synced) return; // not judged by until both were listed once
      this.readAt = Date.now();
      if (this.failing) log.info("reading the fleet's Leases and Nodes works again");
      this.failing = false;
    } catch (err) {
      if (!this.failing) log.warn({ err }, "cannot read the fleet's Leases and Nodes from Kubernetes: nodes' store heartbeats stand in until it can");
      this.failing = true;
    }
  }

  private renewed(): Map<string, number> {
    if (!this.renewedCache) {
      this.renewedCache = new Map();
      for (const l of this.leases.items.values()) {
        const node = l.metadata?.labels?.[LEASE_LABEL];
        const at = Date.parse(l.spec?.renewTime ?? "");
        if (node && Number.isFinite(at)) this.renewedCache.set(node, at);
      }
    }
    return this.renewedCache;
  }

  private unschedulable(): Map<string, string> {
    if (!this.unschedulableCache) {
      this.unschedulableCache = new Map();
      for (const [name, n] of this.nodes.items) {
        const ready = n.status?.conditions?.find((c) => c.type === "Ready")?.status;
        const labelledOff = n.metadata?.labels?.[SANDBOXES_LABEL] === "false";
        this.unschedulableCache.set(
          name,
          n.spec?.unschedulable ? "cordoned" : ready !== "True" ? `Node not Ready (${ready ?? "no status"})` : labelledOff ? `labelled ${SANDBOXES_LABEL}=false` : "",
        );
      }
    }
    return this.unschedulableCache;
  }

  /**
   * The records as Kubernetes sees them: `heartbeatAt` is the Lease's last
   * renewal (0 without a Lease: lost; the store's heartbeat while the API
   * cannot be read), and a node whose Node is (last seen) cordoned, not
   * Ready or labelled `locale2b.dev/sandboxes=false` is `cordoned` (it keeps
   * its sandboxes, takes no creates).
   */
  view(records: NodeRecord[], now = Date.now()): NodeRecord[] {
    const current = this.current(now);
    const renewed = this.renewed();
    const unschedulable = this.unschedulable();
    return records.map((n) => {
      // A Node last seen cordoned or not Ready stays out through an outage of the Kubernetes API too.
      const why = unschedulable.get(n.name);
      return { ...n, ...(current ? { heartbeatAt: renewed.get(n.name) ?? 0 } : {}), ...(why ? { state: "cordoned" as const } : {}) };
    });
  }

  /** Lists the Leases and Nodes (awaited), starts watching them, and asks the apiserver every heartbeat. */
  async start(): Promise<void> {
    await Promise.all([this.leases.start(), this.nodes.start()]);
    await this.every.start();
  }

  async stop(): Promise<void> {
    await this.every.stop();
    await Promise.all([this.leases.stop(), this.nodes.stop()]);
  }
}
