// A fleet node's liveness in Kubernetes: a coordination.k8s.io/v1 Lease per
// node (`locale2b-node-<name>` in the pods' namespace), renewed by the node
// agent every heartbeat, as kubelets renew theirs in kube-node-lease. API
// replicas read the Leases (kubernetes-nodes.ts): a node whose Lease has not
// been renewed for its duration is lost. The agent's service account may
// create and patch Leases in its namespace only (deploy/kubernetes/rbac.yaml).
import type { Logger } from "pino";
import { NODE_HEARTBEAT_MS, NODE_LOST_MS } from "../domain/node.js";
import { kubeError, kubeRequest, type InCluster } from "./kubernetes-client.js";
import { Periodic } from "./periodic.js";

/** The label every fleet node's Lease carries (API replicas list by it). */
export const LEASE_LABEL = "locale2b.dev/fleet-node";

/** The Lease of fleet node `node`. */
export function leaseName(node: string): string {
  return `locale2b-node-${node}`;
}

export function leasesPath(namespace: string, name?: string): string {
  return `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/leases${name ? `/${encodeURIComponent(name)}` : ""}`;
}

/** Kubernetes' MicroTime: RFC 3339 with exactly six fractional digits. */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

export interface LeaseOptions {
  cluster: InCluster;
  /** The fleet node's name (the Kubernetes Node's). */
  node: string;
  /** Who holds it: the pod's name (the DaemonSet passes metadata.name as POD_NAME), else the node's. */
  holder: string;
  log: Logger;
  everyMs?: number;
}

/** Keeps this node's Lease renewed: created at the first renewal, patched afterwards. */
export class NodeLease {
  private failing = false;
  private readonly every: Periodic;

  constructor(private readonly o: LeaseOptions) {
    this.every = new Periodic(() => this.renewLogged(), o.everyMs ?? NODE_HEARTBEAT_MS);
  }

  private spec(now: number): Record<string, unknown> {
    return { holderIdentity: this.o.holder, leaseDurationSeconds: NODE_LOST_MS / 1000, renewTime: microTime(now) };
  }

  private async renewOnce(): Promise<void> {
    const { cluster, node } = this.o;
    const name = leaseName(node);
    const now = Date.now();
    const patched = await kubeRequest(cluster, "PATCH", leasesPath(cluster.namespace, name), { spec: this.spec(now) }, "application/merge-patch+json");
    if (patched.status === 200) return;
    if (patched.status !== 404) throw kubeError(`PATCH lease ${name}`, patched);
    const created = await kubeRequest(cluster, "POST", leasesPath(cluster.namespace), {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name, namespace: cluster.namespace, labels: { [LEASE_LABEL]: node } },
      spec: { ...this.spec(now), acquireTime: microTime(now) },
    });
    if (created.status !== 201 && created.status !== 409) throw kubeError(`POST lease ${name}`, created);
  }

  /** One renewal; a failure is logged once until one works again (the next heartbeat tries again). */
  renew(): Promise<void> {
    return this.every.run();
  }

  private async renewLogged(): Promise<void> {
    try {
      await this.renewOnce();
      if (this.failing) this.o.log.info({ node: this.o.node }, "renewing this node's Lease works again");
      this.failing = false;
    } catch (err) {
      if (!this.failing) this.o.log.warn({ err, node: this.o.node }, `cannot renew this node's Lease: API replicas judge it lost ${NODE_LOST_MS / 1000} s after the last renewal`);
      this.failing = true;
    }
  }

  start(): Promise<void> {
    return this.every.start();
  }

  stop(): Promise<void> {
    return this.every.stop();
  }
}
