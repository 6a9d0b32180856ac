// A fleet node in a Kubernetes pod follows its Node's cordon: `kubectl cordon`
// (spec.unschedulable) cordons it in the fleet's store as `locale2b nodes
// cordon` does, `kubectl uncordon` readies it. It reads its own Node object
// (the pod's service account needs `get` on nodes: deploy/kubernetes/rbac.yaml)
// every heartbeat; plain HTTPS with the in-cluster credentials, so the node
// needs no Kubernetes client library.
import { readFileSync } from "node:fs";
import https from "node:https";
import type { Logger } from "pino";
import { NODE_HEARTBEAT_MS } from "../domain/node.js";
import type { Store } from "../store/store.js";

const SA = "/var/run/secrets/kubernetes.io/serviceaccount";

export interface InCluster {
  /** https://host:port of the apiserver (the `kubernetes` Service). */
  server: string;
  token: string;
  ca: Buffer;
}

/** The pod's in-cluster credentials, or undefined outside Kubernetes (or without a service-account token). */
export function inCluster(env: NodeJS.ProcessEnv = process.env): InCluster | undefined {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) return undefined;
  try {
    return {
      server: `https://${host.includes(":") ? `[${host}]` : host}:${port}`,
      token: readFileSync(`${SA}/token`, "utf8").trim(),
      ca: readFileSync(`${SA}/ca.crt`),
    };
  } catch {
    return undefined;
  }
}

/** GET a path on the apiserver: its status and parsed JSON body. */
function getJson(c: InCluster, path: string, timeoutMs = 5_000): Promise<{ status: number; body: unknown }> {
  return new Promise((resolve, reject) => {
    const req = https.get(`${c.server}${path}`, { ca: c.ca, headers: { authorization: `Bearer ${c.token}`, accept: "application/json" }, timeout: timeoutMs }, (res) => {
      let text = "";
      res.setEncoding("utf8").on("data", (d: string) => (text += d));
      res.on("end", () => {
        try {
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as unknown });
        } catch {
          resolve({ status: res.statusCode ?? 0, body: text });
        }
      });
    });
    req.on("timeout", () => req.destroy(new Error(`no answer from ${c.server} in ${timeoutMs} ms`)));
    req.on("error", reject);
  });
}

/** The addresses the Kubernetes API is served at: its Service's ClusterIP and its endpoints (the apiservers). */
export async function apiserverAddresses(c: InCluster): Promise<string[]> {
  const out = [new URL(c.server).hostname.replace(/^\[|\]$/g, "")];
  const res = await getJson(c, "/api/v1/namespaces/default/endpoints/kubernetes");
  if (res.status !== 200) throw new Error(`GET endpoints default/kubernetes: ${res.status}`);
  for (const subset of (res.body as { subsets?: { addresses?: { ip?: string }[] }[] }).subsets ?? []) {
    for (const a of subset.addresses ?? []) if (a.ip) out.push(a.ip);
  }
  return out;
}

/** Whether the Node named `name` is cordoned (spec.unschedulable). */
export async function nodeUnschedulable(c: InCluster, name: string): Promise<boolean> {
  const res = await getJson(c, `/api/v1/nodes/${encodeURIComponent(name)}`);
  if (res.status !== 200) {
    const msg = (res.body as { message?: string } | undefined)?.message ?? String(res.body).slice(0, 200);
    throw new Error(`GET node ${name}: ${res.status} ${msg}`);
  }
  return (res.body as { spec?: { unschedulable?: boolean } }).spec?.unschedulable === true;
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
  private timer: NodeJS.Timeout | undefined;
  private last: boolean | undefined;
  private failing = false;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly o: CordonFollowerOptions) {}

  /** One look at the Node; the store is written only on a change (or a cordon at start). */
  check(): Promise<void> {
    this.running = this.running.then(async () => {
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
    });
    return this.running;
  }

  async start(): Promise<void> {
    await this.check();
    this.timer = setInterval(() => void this.check(), this.o.everyMs ?? NODE_HEARTBEAT_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
