// Where everything of one test cluster lives: its state directory, addresses, interface and namespace names,
// cgroups. Derived from the cluster's name and kept in <stateDir>/state.json, so that `down` (from another
// process, or after a crash) finds exactly what `up` made and nothing else.
//
// Addresses, for a cluster given the free octet B (10.B.0.0/16, one per cluster on the host):
//   10.B.0.1         the host's end: a bridge `l2k-<id>`; etcd, kube-apiserver, controller-manager and
//                    scheduler listen here (so clusters never share a port)
//   10.B.0.1<i>      node i's eth0 in its network namespace `l2k-<name>-node<i>`, a veth into the bridge
//   10.B.<128+i>.0/24  node i's pods (CNI bridge in the node's namespace); every node and the host route
//                    the other nodes' pod ranges to those nodes
//   10.B.96.0/20     Service ClusterIPs (kube-proxy in each node's namespace)
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { join } from "node:path";

export interface NodeLayout {
  name: string;
  index: number;
  ip: string;
  podCIDR: string;
  netns: string;
  netnsPath: string;
  hostVeth: string;
  dir: string;
  containerdSocket: string;
  /** The kubelet's cgroupRoot: its pods' cgroups go under it. */
  cgroupRoot: string;
  /** The CNI network's name: libcni keeps per-network files under /var/lib/cni, removed by name on down. */
  cniNetwork: string;
}

export interface ClusterLayout {
  name: string;
  id: string;
  stateDir: string;
  octet: number;
  bridge: string;
  hostIP: string;
  nodeCIDR: string;
  clusterCIDR: string;
  serviceCIDR: string;
  kubernetesServiceIP: string;
  apiserverURL: string;
  etcdURL: string;
  cgroupParent: string;
  /** Comment on the host iptables rules this cluster adds (removed by it on down). */
  iptablesComment: string;
  kubeconfig: string;
  /**
   * A directory for the pods' hostPath volumes. Every node shares the host's filesystem, so a DaemonSet that
   * needs a directory of its own per node mounts a subdirectory: `subPathExpr: $(NODE_NAME)` with NODE_NAME
   * from the downward API. Under the state directory: down unmounts and removes it with the rest.
   */
  hostDir: string;
  binDir: string;
  pauseTar: string;
  pauseRef: string;
  nodes: NodeLayout[];
}

export const NAME_PATTERN = /^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$/;

export function defaultStateDir(name: string): string {
  return `/tmp/locale2b-k8s-${name}`;
}

/** Octets (10.X.0.0/16) already routed or addressed on the host, or held by another cluster's state. */
function octetsInUse(): Set<number> {
  const used = new Set<number>();
  const text = (() => {
    try {
      return execFileSync("ip", ["-4", "-o", "addr"], { encoding: "utf8" }) + execFileSync("ip", ["-4", "route"], { encoding: "utf8" });
    } catch {
      return "";
    }
  })();
  for (const m of text.matchAll(/\b10\.(\d+)\.\d+\.\d+/g)) used.add(Number(m[1]));
  for (const e of readdirSync("/tmp")) {
    if (!e.startsWith("locale2b-k8s-")) continue;
    try {
      used.add((JSON.parse(readFileSync(join("/tmp", e, "state.json"), "utf8")) as ClusterLayout).octet);
    } catch {
      // not a cluster, or not started
    }
  }
  return used;
}

export function planCluster(opts: { name: string; nodes: number; stateDir?: string; binDir: string; pauseTar: string; pauseRef: string }): ClusterLayout {
  const { name } = opts;
  if (!NAME_PATTERN.test(name)) throw new Error(`cluster name ${JSON.stringify(name)}: use 1-20 of a-z, 0-9 and '-'`);
  if (!Number.isInteger(opts.nodes) || opts.nodes < 0 || opts.nodes > 9) throw new Error(`nodes: 0 (control plane only) to 9, not ${opts.nodes}`);
  const id = createHash("sha256").update(name).digest("hex").slice(0, 6);
  const used = octetsInUse();
  const start = 100 + (parseInt(id, 16) % 100);
  let octet = -1;
  for (let k = 0; k < 100; k++) {
    const o = 100 + ((start - 100 + k) % 100);
    if (!used.has(o)) {
      octet = o;
      break;
    }
  }
  if (octet < 0) throw new Error("no free 10.X.0.0/16 (X in 100-199) for the cluster's network on this host");
  const stateDir = opts.stateDir ?? defaultStateDir(name);
  const hostIP = `10.${octet}.0.1`;
  const cgroupParent = `/locale2b-k8s-${name}`;
  const nodes: NodeLayout[] = [];
  for (let i = 1; i <= opts.nodes; i++) {
    const node = `node${i}`;
    const dir = join(stateDir, node);
    const netns = `l2k-${name}-${node}`;
    nodes.push({
      name: node,
      index: i,
      ip: `10.${octet}.0.${10 + i}`,
      podCIDR: `10.${octet}.${128 + i}.0/24`,
      netns,
      netnsPath: `/run/netns/${netns}`,
      hostVeth: `l2k-${id}-${i}`,
      dir,
      containerdSocket: join(dir, "containerd", "containerd.sock"),
      cgroupRoot: `${cgroupParent}/${node}`,
      cniNetwork: `l2k-${id}-${node}`,
    });
  }
  return {
    name,
    id,
    stateDir,
    octet,
    bridge: `l2k-${id}`,
    hostIP,
    nodeCIDR: `10.${octet}.0.0/24`,
    clusterCIDR: `10.${octet}.128.0/17`,
    serviceCIDR: `10.${octet}.96.0/20`,
    kubernetesServiceIP: `10.${octet}.96.1`,
    apiserverURL: `https://${hostIP}:6443`,
    etcdURL: `http://${hostIP}:2379`,
    cgroupParent,
    iptablesComment: `locale2b-k8s-${name}`,
    kubeconfig: join(stateDir, "admin.kubeconfig"),
    hostDir: join(stateDir, "host"),
    binDir: opts.binDir,
    pauseTar: opts.pauseTar,
    pauseRef: opts.pauseRef,
    nodes,
  };
}

export function saveLayout(layout: ClusterLayout): void {
  writeFileSync(join(layout.stateDir, "state.json"), JSON.stringify(layout, null, 2) + "\n");
}

/** The layout `up` saved under the state directory, or undefined when there is none. */
export function loadLayout(stateDir: string): ClusterLayout | undefined {
  const file = join(stateDir, "state.json");
  if (!existsSync(file)) return undefined;
  return JSON.parse(readFileSync(file, "utf8")) as ClusterLayout;
}
