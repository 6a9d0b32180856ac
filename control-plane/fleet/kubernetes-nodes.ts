// How an API replica in Kubernetes sees the fleet's nodes: their records in
// the store say where each node is and what it has room for; Kubernetes says
// whether it is alive and may take creates. A node is alive while its Lease
// (kubernetes-lease.ts) is renewed, and takes creates only while its Node is
// Ready, not cordoned (`kubectl cordon`) and not labelled
// `locale2b.dev/sandboxes=false` (no new sandboxes there, while pods still
// schedule and its sandboxes keep running). Leases and Nodes are listed every
// heartbeat. When the Kubernetes API cannot be read for a while, the nodes'
// own heartbeats in the store stand in (an apiserver outage must not make
// every node look lost); the Nodes last seen cordoned or not Ready stay out.
import type { Logger } from "pino";
import { NODE_HEARTBEAT_MS, NODE_LOST_MS, type NodeRecord } from "../domain/node.js";
import { kubeGet, type InCluster } from "./kubernetes-client.js";
import { LEASE_LABEL, leasesPath } from "./kubernetes-lease.js";
import { Periodic } from "./periodic.js";

interface LeaseList {
  items?: { metadata?: { labels?: Record<string, string> }; spec?: { renewTime?: string } }[];
}
interface NodeList {
  items?: { metadata?: { name?: string; labels?: Record<string, string> }; spec?: { unschedulable?: boolean }; status?: { conditions?: { type?: string; status?: string }[] } }[];
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
  /** Fleet node name → its Lease's last renewal (ms since epoch). */
  private renewed = new Map<string, number>();
  /** Kubernetes Node name → why it takes no creates ("" when it does). */
  private unschedulable = new Map<string, string>();
  private readAt = 0;
  private failing = false;
  private readonly every: Periodic;

  constructor(private readonly o: KubernetesNodesOptions) {
    this.every = new Periodic(() => this.read(), o.everyMs ?? NODE_HEARTBEAT_MS);
  }

  /** Whether the last read is recent enough to judge by (else the store's heartbeats do). */
  current(now = Date.now()): boolean {
    return now - this.readAt <= NODE_LOST_MS / 2;
  }

  /** What a lost node's message says is missing. */
  silence(): string {
    return this.current() ? "no Lease renewal" : "no heartbeat";
  }

  /** Reads the fleet's Leases and the cluster's Nodes once (a failure is logged once until a read works again). */
  refresh(): Promise<void> {
    return this.every.run();
  }

  private async read(): Promise<void> {
    const { cluster, log } = this.o;
    try {
      const [leases, nodes] = await Promise.all([
        kubeGet<LeaseList>(cluster, `${leasesPath(cluster.namespace)}?labelSelector=${encodeURIComponent(LEASE_LABEL)}`, "list the fleet's Leases"),
        kubeGet<NodeList>(cluster, "/api/v1/nodes", "list Nodes"),
      ]);
      const renewed = new Map<string, number>();
      for (const l of leases.items ?? []) {
        const node = l.metadata?.labels?.[LEASE_LABEL];
        const at = Date.parse(l.spec?.renewTime ?? "");
        if (node && Number.isFinite(at)) renewed.set(node, at);
      }
      const unschedulable = new Map<string, string>();
      for (const n of nodes.items ?? []) {
        if (!n.metadata?.name) continue;
        const ready = n.status?.conditions?.find((c) => c.type === "Ready")?.status;
        const labelledOff = n.metadata.labels?.[SANDBOXES_LABEL] === "false";
        unschedulable.set(
          n.metadata.name,
          n.spec?.unschedulable ? "cordoned" : ready !== "True" ? `Node not Ready (${ready ?? "no status"})` : labelledOff ? `labelled ${SANDBOXES_LABEL}=false` : "",
        );
      }
      this.renewed = renewed;
      this.unschedulable = unschedulable;
      this.readAt = Date.now();
      if (this.failing) log.info("reading the fleet's Leases and Nodes works again");
      this.failing = false;
    } catch (err) {
      if (!this.failing) log.warn({ err }, "cannot read the fleet's Leases and Nodes from Kubernetes: nodes' store heartbeats stand in until it can");
      this.failing = true;
    }
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
    return records.map((n) => {
      // A Node last seen cordoned or not Ready stays out through an outage of the Kubernetes API too.
      const why = this.unschedulable.get(n.name);
      return { ...n, ...(current ? { heartbeatAt: this.renewed.get(n.name) ?? 0 } : {}), ...(why ? { state: "cordoned" as const } : {}) };
    });
  }

  start(): Promise<void> {
    return this.every.start();
  }

  stop(): Promise<void> {
    return this.every.stop();
  }
}
