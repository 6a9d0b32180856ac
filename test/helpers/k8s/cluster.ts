// A real Kubernetes cluster on this one machine, for tests: `upCluster` brings up etcd, the control plane
// and N nodes (each its own containerd + kubelet + kube-proxy in its own network namespace) under a state
// directory and waits for every node to be Ready; `downCluster` stops it all and removes everything it made
// (processes, mounts, network namespaces, veths, routes, iptables rules, cgroups, files), and says what, if
// anything, it could not remove. scripts/k8s/cluster.sh is the command-line front end.
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { buildBinaries, k8sMissing, type K8sArtifacts } from "./binaries.js";
import { cgroupLeft, cgroupPids, removeCgroup } from "./cgroups.js";
import { controlPlaneOf, get, startControlPlane } from "./control-plane.js";
import { alive, killAll, mountsUnder, netnsIdentity, processes, run, sleep, unmountUnder } from "./host.js";
import { waitForValue } from "../wait.js";
import { defaultStateDir, loadLayout, planCluster, saveLayout, type ClusterLayout, type NodeLayout } from "./layout.js";
import { setupNetwork, networkLeftovers, teardownNetwork } from "./network.js";
import { ctr, importImage as importIntoNode, nodeProcesses, startNode } from "./node.js";

export interface Cluster {
  layout: ClusterLayout;
  /** The admin kubeconfig (system:masters), for kubectl and @kubernetes/client-node. */
  kubeconfig: string;
  /** kubectl of the cluster's version. */
  kubectl: string;
  /** Milliseconds each phase of `up` took. */
  timings: Record<string, number>;
}

export interface UpOptions {
  name: string;
  nodes?: number;
  stateDir?: string;
  /** Take down a cluster of the same name first, if one is up; otherwise that is an error. */
  replace?: boolean;
  /** Print the build's progress (a cold build takes a while). */
  progress?: boolean;
  readyTimeoutMs?: number;
  /** etcd and kube-apiserver only (control-plane.ts); with `nodes: 0`, no node at all. */
  apiserverOnly?: boolean;
}

export async function upCluster(opts: UpOptions): Promise<Cluster> {
  const missing = k8sMissing();
  if (missing) throw new Error(`cannot run a test cluster here: ${missing}`);
  const stateDir = opts.stateDir ?? defaultStateDir(opts.name);
  if (existsSync(stateDir)) {
    if (!opts.replace) throw new Error(`${stateDir} exists: the cluster ${opts.name} is up (or was not taken down); run down first`);
    await downCluster(stateDir);
  }
  const timings: Record<string, number> = {};
  const t0 = Date.now();
  let t = t0;
  const lap = (phase: string) => {
    const now = Date.now();
    timings[phase] = now - t;
    t = now;
  };
  const artifacts: K8sArtifacts = await buildBinaries({ progress: opts.progress });
  lap("binaries");
  mkdirSync(stateDir, { recursive: true });
  const layout = planCluster({ name: opts.name, nodes: opts.nodes ?? 2, stateDir, binDir: artifacts.binDir, pauseTar: artifacts.pauseTar, pauseRef: artifacts.pauseRef });
  saveLayout(layout); // before anything is made: down then knows what to look for
  mkdirSync(layout.hostDir);
  try {
    await setupNetwork(layout);
    lap("network");
    const cp = await startControlPlane(layout, { apiserverOnly: opts.apiserverOnly });
    lap("controlPlane");
    await Promise.all(layout.nodes.map((n) => startNode(layout, n, cp)));
    lap("nodesStarted");
    await waitForValue("every node to be Ready", async () => ((await notReadyNodes(layout)).length === 0 ? true : undefined), { timeoutMs: opts.readyTimeoutMs ?? 90_000, everyMs: 250 });
    lap("nodesReady");
    // Pods cannot be created before the controller-manager has made the namespace's default ServiceAccount.
    if (!opts.apiserverOnly) {
      await waitForValue("the default ServiceAccount", async () => ((await adminGet(layout, "/api/v1/namespaces/default/serviceaccounts/default")).status === 200 ? true : undefined), { timeoutMs: 30_000, everyMs: 100 });
      lap("serviceAccount");
    }
  } catch (e) {
    const why = (e as Error).message;
    const logs = join(stateDir, "logs");
    const kept = `${stateDir}.failed-logs`;
    rmSync(kept, { recursive: true, force: true });
    if (existsSync(logs)) {
      await run("cp", ["-a", logs, kept], { allowFail: true });
    }
    const left = await downCluster(stateDir);
    throw new Error(`cluster ${opts.name} did not come up: ${why}${existsSync(kept) ? `\n(logs kept in ${kept})` : ""}${left.length ? `\nleft behind: ${left.join("; ")}` : ""}`);
  }
  timings.total = Date.now() - t0;
  writeFileSync(join(stateDir, "timings.json"), JSON.stringify(timings) + "\n");
  return { layout, kubeconfig: layout.kubeconfig, kubectl: join(layout.binDir, "kubectl"), timings };
}

/** The cluster a state directory holds (after `up`, possibly from another process). */
export function openCluster(nameOrStateDir: string): Cluster {
  const stateDir = nameOrStateDir.includes("/") ? nameOrStateDir : defaultStateDir(nameOrStateDir);
  const layout = loadLayout(stateDir);
  if (!layout) throw new Error(`no cluster state in ${stateDir}`);
  let timings = {};
  try {
    timings = JSON.parse(readFileSync(join(stateDir, "timings.json"), "utf8"));
  } catch {
    // not finished coming up
  }
  return { layout, kubeconfig: layout.kubeconfig, kubectl: join(layout.binDir, "kubectl"), timings };
}

/** GET on the apiserver as admin. */
function adminGet(l: ClusterLayout, path: string) {
  const pki = join(l.stateDir, "pki");
  return get(`${l.apiserverURL}${path}`, { ca: join(pki, "ca.crt"), cert: join(pki, "admin.crt"), key: join(pki, "admin.key") });
}

/** Names of the nodes that are not (yet) registered and Ready (with a kubelet heartbeat after `since`, if given). */
export async function notReadyNodes(l: ClusterLayout, since?: Date): Promise<string[]> {
  const res = await adminGet(l, "/api/v1/nodes");
  if (res.status !== 200) return l.nodes.map((n) => n.name);
  type Condition = { type: string; status: string; lastHeartbeatTime?: string };
  const items = (JSON.parse(res.body) as { items: { metadata: { name: string }; status?: { conditions?: Condition[] } }[] }).items;
  const isReady = (c: Condition) => c.type === "Ready" && c.status === "True" && (!since || Date.parse(c.lastHeartbeatTime ?? "") >= Math.floor(since.getTime() / 1000) * 1000);
  const ready = new Set(items.filter((i) => i.status?.conditions?.some(isReady)).map((i) => i.metadata.name));
  return l.nodes.filter((n) => !ready.has(n.name)).map((n) => n.name);
}

/** Imports an image tar into every node's containerd (or the named ones), in parallel. */
export async function importImage(c: Cluster, tarPath: string, nodes?: string[]): Promise<void> {
  await Promise.all(c.layout.nodes.filter((n) => !nodes || nodes.includes(n.name)).map((n) => importIntoNode(n, tarPath)));
}

function nodeOf(c: Cluster, name: string): NodeLayout {
  const n = c.layout.nodes.find((x) => x.name === name);
  if (!n) throw new Error(`no node ${name} in cluster ${c.layout.name} (${c.layout.nodes.map((x) => x.name).join(", ")})`);
  return n;
}

/**
 * A node lost at once, as if powered off: its kubelet, kube-proxy, containerd, shims and every container
 * SIGKILLed. Its namespace, files and mounts stay (for startNodeAgain, and down removes them). The
 * controller-manager marks it NotReady about 20 s later.
 */
export async function stopNode(c: Cluster, name: string): Promise<void> {
  const n = nodeOf(c, name);
  for (let round = 0; round < 5; round++) {
    const pids = nodeProcesses(n);
    if (!pids.length) return;
    await killAll(pids);
  }
}

/** Starts a stopped node again (same containerd state, images and name) and waits until it is Ready. */
export async function startNodeAgain(c: Cluster, name: string, timeoutMs = 60_000): Promise<void> {
  const n = nodeOf(c, name);
  if (nodeProcesses(n).length) throw new Error(`${name} still runs: stopNode first`);
  // containerd refuses to start on a socket file left by the killed one.
  for (const s of [n.containerdSocket, `${n.containerdSocket}.ttrpc`]) rmSync(s, { force: true });
  const since = new Date();
  await startNode(c.layout, n, controlPlaneOf(c.layout));
  await waitForValue(`${name} to be Ready again`, async () => (!(await notReadyNodes(c.layout, since)).includes(name) ? true : undefined), { timeoutMs, everyMs: 250 });
}

/** `kubectl` against the cluster as admin. */
export async function kubectl(c: Cluster, args: string[], opts: { allowFail?: boolean; input?: string; timeoutMs?: number } = {}) {
  return run(c.kubectl, ["--kubeconfig", c.kubeconfig, ...args], opts);
}

// ---- down ----

/** Processes of the cluster: any naming its state directory (daemons, shims) or inside a node's namespace. */
function clusterProcesses(l: ClusterLayout): number[] {
  const netns = new Set(l.nodes.map((n) => netnsIdentity(n.netnsPath)).filter((x): x is string => !!x));
  return processes()
    .filter((p) => p.cmdline.includes(l.stateDir + "/") || (p.netns !== undefined && netns.has(p.netns)))
    .map((p) => p.pid);
}

/** Ids of the node's pod sandboxes and containers, read from containerd's CRI directories (alive or not). */
function containerIds(n: NodeLayout): string[] {
  const cri = join(n.dir, "containerd", "root", "io.containerd.grpc.v1.cri");
  const ids: string[] = [];
  for (const kind of ["sandboxes", "containers"]) {
    try {
      ids.push(...readdirSync(join(cri, kind)));
    } catch {
      // none yet
    }
  }
  return ids;
}

/**
 * Files the kubelet, libcni and containerd keep outside the state directory, by the names this cluster gives
 * them: /var/log/containers links into it, libcni's cache of each pod's networks (its own network and
 * containerd's `cni-loopback`), shim sockets (/run/containerd/s/sha256(<address>/<namespace>/<id>)).
 */
function outsideFiles(l: ClusterLayout, ids: Map<NodeLayout, string[]>): string[] {
  const files: string[] = [];
  try {
    for (const f of readdirSync("/var/log/containers")) {
      const p = join("/var/log/containers", f);
      try {
        if (readlinkSync(p).startsWith(l.stateDir + "/")) files.push(p);
      } catch {
        // not a link
      }
    }
  } catch {
    // no such directory
  }
  for (const n of l.nodes) {
    for (const id of ids.get(n) ?? []) {
      files.push(`/var/lib/cni/results/cni-loopback-${id}-lo`, `/var/lib/cni/results/${n.cniNetwork}-${id}-eth0`);
      for (const a of [n.containerdSocket, `${n.containerdSocket}.ttrpc`]) files.push(`/run/containerd/s/${createHash("sha256").update(`${a}/k8s.io/${id}`).digest("hex")}`);
    }
  }
  return files.filter((f) => existsSync(f));
}

/**
 * Stops the cluster held in a state directory (or by name) and removes all it made, the state directory
 * included unless `keepState`. Returns what is left behind (empty when clean). Safe to run again.
 */
export async function downCluster(nameOrStateDir: string, opts: { keepState?: boolean } = {}): Promise<string[]> {
  const stateDir = nameOrStateDir.includes("/") ? nameOrStateDir : defaultStateDir(nameOrStateDir);
  const l = loadLayout(stateDir);
  if (!l) {
    if (existsSync(stateDir)) rmSync(stateDir, { recursive: true, force: true });
    return [];
  }
  // 1. The kubelets and kube-proxies first: nothing restarts containers while they go.
  const agents = processes().filter((p) => p.cmdline.includes(l.stateDir + "/") && /\/(kubelet|kube-proxy)$/.test(p.cmdline.split(" ")[0] ?? "")).map((p) => p.pid);
  await killAll(agents);
  // 2. Containers through their containerd while it runs, so that the shims exit and remove their sockets.
  const ids = new Map(l.nodes.map((n) => [n, containerIds(n)] as const));
  await Promise.all(
    l.nodes.map(async (n) => {
      if (!existsSync(n.containerdSocket)) return;
      const tasks = (await ctr(n, ["tasks", "ls", "-q"], { allowFail: true, timeoutMs: 5000 })).stdout.split("\n").filter(Boolean);
      if (tasks.length) await ctr(n, ["tasks", "delete", "--force", ...tasks], { allowFail: true, timeoutMs: 20_000 });
    }),
  );
  // 3. Everything else: daemons, shims, containers (the cgroups), host-network pods (the namespaces).
  for (let round = 0; round < 5; round++) {
    const pids = [...new Set([...clusterProcesses(l), ...cgroupPids(l.cgroupParent)])];
    if (!pids.length) break;
    await killAll(pids);
  }
  // 4. Mounts (pod volumes, container root filesystems, pod network namespaces, shm), then the network.
  await unmountUnder(l.stateDir);
  await teardownNetwork(l);
  // 5. Cgroups (they empty once the processes are reaped) and the files left outside the state directory.
  for (let k = 0; k < 20 && removeCgroup(l.cgroupParent).length; k++) await sleep(100);
  for (const f of outsideFiles(l, ids)) rmSync(f, { recursive: true, force: true });
  // containerd 1.6 puts every shim's socket in /run/containerd/s whatever its state directory: remove the
  // directories it made if they are empty and no other containerd runs (a system one keeps its socket there).
  if (!processes().some((p) => /(^|\/)containerd$/.test(p.cmdline.split(" ")[0] ?? ""))) {
    for (const d of ["/run/containerd/s", "/run/containerd"]) {
      try {
        rmdirSync(d);
      } catch {
        // not empty, or not there
      }
    }
  }
  for (const d of ["/var/lib/cni/results", "/var/lib/cni"]) {
    try {
      rmdirSync(d); // libcni's cache, made by the first pod; kept if anything else uses it
    } catch {
      // not empty, or not there
    }
  }
  const left = await clusterLeftovers(l, ids);
  if (!opts.keepState && !left.some((x) => x.startsWith("mount ") || x.startsWith("process "))) rmSync(l.stateDir, { recursive: true, force: true });
  return left;
}

/** What of the cluster is on the host: processes, mounts, network, cgroups, outside files (empty after down). */
export async function clusterLeftovers(l: ClusterLayout, ids = new Map(l.nodes.map((n) => [n, containerIds(n)] as const))): Promise<string[]> {
  const left: string[] = [];
  const procs = new Map(processes().map((p) => [p.pid, p.cmdline]));
  for (const pid of new Set([...clusterProcesses(l), ...cgroupPids(l.cgroupParent)])) if (alive(pid)) left.push(`process ${pid} ${procs.get(pid)?.slice(0, 120) ?? ""}`);
  for (const m of mountsUnder(l.stateDir)) left.push(`mount ${m}`);
  left.push(...(await networkLeftovers(l)));
  for (const d of cgroupLeft(l.cgroupParent)) left.push(`cgroup ${d}`);
  for (const f of outsideFiles(l, ids)) left.push(`file ${f}`);
  return left;
}

/** A one-screen summary for `cluster.sh status`. */
export async function clusterStatus(nameOrStateDir: string): Promise<string> {
  const c = openCluster(nameOrStateDir);
  const l = c.layout;
  const lines = [`cluster ${l.name}: state ${l.stateDir}`, `apiserver ${l.apiserverURL}`, `kubeconfig ${l.kubeconfig}`, `kubectl ${c.kubectl}`];
  try {
    const notReady = await notReadyNodes(l);
    for (const n of l.nodes) lines.push(`${n.name} ${n.ip} pods ${n.podCIDR} netns ${n.netns}: ${notReady.includes(n.name) ? "NOT READY" : "Ready"}`);
  } catch (e) {
    lines.push(`apiserver unreachable: ${(e as Error).message}`);
  }
  if (Object.keys(c.timings).length) lines.push(`up timings (ms): ${JSON.stringify(c.timings)}`);
  return lines.join("\n");
}
