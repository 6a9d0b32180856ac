// How a fleet node makes itself known and stays so: its record in the store
// (address, room, images) written now and every heartbeat; in a Kubernetes
// pod also a Lease the API replicas judge its liveness by, and its Node's
// cordon followed (`kubectl cordon` of the host cordons the fleet node).
import { hostname } from "node:os";
import type { InCluster } from "./kubernetes-client.js";
import { KubernetesCordonFollower } from "./kubernetes-cordon.js";
import { NodeLease } from "./kubernetes-lease.js";
import { NodeHeartbeat, type HeartbeatOptions } from "./node-agent.js";

export interface NodePresence {
  stop(): Promise<void>;
}

/** Starts the heartbeat, and with `cluster` the Lease and the cordon follower; stop() ends all three. */
export async function startNodePresence(o: HeartbeatOptions & { cluster?: InCluster }): Promise<NodePresence> {
  const heartbeat = new NodeHeartbeat(o);
  await heartbeat.start();
  const { cluster } = o;
  const cordon = cluster ? new KubernetesCordonFollower({ store: o.store, name: o.name, cluster, log: o.log }) : undefined;
  await cordon?.start();
  const lease = cluster ? new NodeLease({ cluster, node: o.name, holder: process.env.POD_NAME || hostname(), log: o.log }) : undefined;
  await lease?.start();
  return {
    async stop() {
      await cordon?.stop();
      await lease?.stop();
      await heartbeat.stop();
    },
  };
}
