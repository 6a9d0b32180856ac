// A fleet node in a Kubernetes pod follows its Node's cordon: `kubectl cordon`
// (spec.unschedulable) cordons it in the fleet's store as `locale2b nodes
// cordon` does, `kubectl uncordon` readies it. It reads its own Node object
// (the pod's service account needs `get` on nodes: deploy/kubernetes/rbac.yaml)
// every heartbeat (kubernetes-client.ts).
import type { Logger } from "pino";
import { NODE_HEARTBEAT_MS } from "../domain/node.js";
import type { Store } from "../store/store.js";
import { kubeGet, type InCluster } from "./kubernetes-client.js";
import { Periodic } from "./periodic.js";

/** Whether the Node named `name` is cordoned (spec.unschedulable). */
export async function nodeUnschedulable(c: InCluster, name: string): Promise<boolean> {
  const node = await kubeGet<{ spec?: { unschedulable?: boolean } }>(c, `/api/v1/nodes/${encodeURIComponent(name)}`, `GET node ${name}`);
  return node.spec?.unschedulable === true;
}

export interface CordonFollowerOptions {
  store: Store;
  /** The fleet node's name: the Kubernetes Node's name (the DaemonSet passes spec.nodeName). */
  name: string;
  cluster: InCluster;
  log: Logger;
  everyMs?: number;
}

/**
 * Follows the Node's cordon: at start a cordoned Node cordons the fleet node;
 * afterwards every change of spec.unschedulable sets the fleet node's state
 * (an uncordon readies it). A `locale2b nodes cordon` stays until the Node
 * changes. A Node that cannot be read is logged once, and tried again.
 */
export class KubernetesCordonFollower {
  private last: boolean | undefined;
  private failing = false;
  private readonly every: Periodic;

  constructor(private readonly o: CordonFollowerOptions) {
    this.every = new Periodic(() => this.look(), o.everyMs ?? NODE_HEARTBEAT_MS);
  }

  /** One look at the Node; the store is written only on a change (or a cordon at start). */
  check(): Promise<void> {
    return this.every.run();
  }

  private async look(): Promise<void> {
    let unschedulable: boolean;
    try {
      unschedulable = await nodeUnschedulable(this.o.cluster, this.o.name);
      if (this.failing) this.o.log.info({ node: this.o.name }, "reading the Kubernetes Node works again");
      this.failing = false;
    } catch (err) {
      if (!this.failing) this.o.log.warn({ err, node: this.o.name }, "cannot read this node's Kubernetes Node: a kubectl cordon is not followed until it can");
      this.failing = true;
      return;
    }
    const changed = this.last === undefined ? unschedulable : unschedulable !== this.last;
    this.last = unschedulable;
    if (!changed) return;
    const state = unschedulable ? "cordoned" : "ready";
    try {
      await this.o.store.setNodeState(this.o.name, state);
      this.o.log.info({ node: this.o.name, state }, unschedulable ? "the Kubernetes Node is cordoned: this node takes no creates" : "the Kubernetes Node is uncordoned: this node takes creates again");
    } catch (err) {
      this.last = undefined; // try again at the next look
      this.o.log.warn({ err, node: this.o.name }, "cannot write this node's cordon to the store");
    }
  }

  start(): Promise<void> {
    return this.every.start();
  }

  stop(): Promise<void> {
    return this.every.stop();
  }
}
