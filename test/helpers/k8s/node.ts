// One real node of the test cluster: its own containerd (root, state and socket under the node's directory),
// kubelet and kube-proxy, all three started inside the node's network namespace with
// `nsenter --net=/run/netns/NAME` (not `ip netns exec`: it remounts /sys, and containerd then fails with
// "Devices cgroup isn't mounted"). They share the host's mount namespace and filesystem.
//
// What these machines need (../shared/k8s-notes.md): kubelet `failCgroupV1: false` on a cgroup v1 host;
// containerd `restrict_oom_score_adj = true` (the VM refuses a lower oom_score_adj, and runc then fails
// with "can't get final child's PID from pipe"); the locally built pause image as `sandbox_image`; every pod
// image imported with ctr (`imagePullPolicy: Never`). Pod network namespaces are mounted under
// containerd's state directory (`netns_mounts_under_state_dir`), so `down` finds them with the rest.
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import YAML from "yaml";
import { cgroupPids, cgroupV2, createCgroup } from "./cgroups.js";
import type { ControlPlane } from "./control-plane.js";
import type { ClusterLayout, NodeLayout } from "./layout.js";
import { alive, netnsIdentity, processes, run, startDaemon, tail } from "./host.js";
import { waitForValue } from "../wait.js";

/** Where the Debian containernetworking-plugins package puts the CNI plugins. */
export const CNI_BIN_DIR = "/usr/lib/cni";

export function containerdConfig(l: ClusterLayout, n: NodeLayout): string {
  const d = join(n.dir, "containerd");
  const q = JSON.stringify;
  return `version = 2
root = ${q(join(d, "root"))}
state = ${q(join(d, "state"))}
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = ${q(n.containerdSocket)}

[ttrpc]
  address = ${q(n.containerdSocket + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = ${q(join(d, "opt"))}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ${q(l.pauseRef)}
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = ${q(join(d, "runc"))}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ${q(CNI_BIN_DIR)}
    conf_dir = ${q(join(n.dir, "cni", "net.d"))}
`;
}

function cniConfig(n: NodeLayout): object {
  return {
    cniVersion: "1.0.0",
    name: n.cniNetwork,
    plugins: [
      {
        type: "bridge",
        bridge: "cni0",
        isGateway: true,
        ipMasq: false,
        hairpinMode: true,
        ipam: { type: "host-local", ranges: [[{ subnet: n.podCIDR }]], routes: [{ dst: "0.0.0.0/0" }], dataDir: join(n.dir, "cni", "ipam") },
      },
    ],
  };
}

function kubeletConfig(l: ClusterLayout, n: NodeLayout, caCert: string): object {
  return {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    failCgroupV1: false,
    cgroupDriver: "cgroupfs",
    cgroupRoot: n.cgroupRoot,
    cgroupsPerQOS: true,
    enforceNodeAllocatable: ["pods"],
    containerRuntimeEndpoint: `unix://${n.containerdSocket}`,
    address: n.ip,
    port: 10250,
    healthzBindAddress: "127.0.0.1",
    healthzPort: 10248,
    authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: caCert } },
    authorization: { mode: "Webhook" },
    staticPodPath: join(n.dir, "manifests"),
    podLogsDir: join(n.dir, "pod-logs"),
    volumePluginDir: join(n.dir, "volume-plugins"),
    failSwapOn: false,
    serializeImagePulls: false,
    // Images come from `ctr import`, never from a registry: no image GC may drop one.
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    evictionHard: { "memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%" },
    rotateCertificates: false,
    serverTLSBootstrap: false,
    resolvConf: "/etc/resolv.conf",
    clusterDomain: "cluster.local",
    nodeStatusUpdateFrequency: "4s",
    // The Lease is renewed every quarter of its duration: 5 s, against the controller-manager's 20 s grace.
    nodeLeaseDurationSeconds: 20,
    nodeStatusReportFrequency: "10s",
    syncFrequency: "10s",
  };
}

function kubeProxyConfig(l: ClusterLayout, n: NodeLayout, kubeconfig: string): object {
  return {
    apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
    kind: "KubeProxyConfiguration",
    clientConnection: { kubeconfig },
    mode: "iptables",
    bindAddress: n.ip,
    clusterCIDR: l.clusterCIDR,
    hostnameOverride: n.name,
    metricsBindAddress: "127.0.0.1:10249",
    healthzBindAddress: "127.0.0.1:10256",
    // Service traffic between pods of one node's bridge returns through the node only when masqueraded.
    iptables: { masqueradeAll: true, syncPeriod: "10s", minSyncPeriod: "0s" },
    // The conntrack table size and timeouts are host-wide sysctls a namespace cannot set: leave them.
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
  };
}

/**
 * The node's processes: everything in its network namespace (containerd, kubelet, kube-proxy, shims,
 * host-network pods) and in its kubelet's cgroups (the other pods).
 */
export function nodeProcesses(n: NodeLayout): number[] {
  const netns = netnsIdentity(n.netnsPath);
  const pids = new Set(cgroupPids(n.cgroupRoot));
  if (netns) for (const p of processes()) if (p.netns === netns) pids.add(p.pid);
  return [...pids];
}

/** `ctr` against one node's containerd, in its `k8s.io` namespace (the one the kubelet uses). */
export function ctr(n: NodeLayout, args: string[], opts: { allowFail?: boolean; timeoutMs?: number } = {}) {
  return run("ctr", ["--address", n.containerdSocket, "--namespace", "k8s.io", ...args], opts);
}

/** Imports an image tar (docker-save or OCI layout) into the node's containerd, unpacked for the CRI. */
export async function importImage(n: NodeLayout, tarPath: string): Promise<void> {
  await ctr(n, ["images", "import", "--snapshotter", "overlayfs", tarPath], { timeoutMs: 300_000 });
}

async function daemon(l: ClusterLayout, n: NodeLayout, name: string, cmd: string, args: string[], ready: () => Promise<boolean>, timeoutMs: number): Promise<number> {
  const log = join(l.stateDir, "logs", `${n.name}-${name}.log`);
  const pid = await startDaemon("nsenter", [`--net=${n.netnsPath}`, "--", cmd, ...args], log);
  await waitForValue(`${name} on ${n.name} (log: ${log})`, async () => {
    if (!alive(pid)) throw new Error(`${name} on ${n.name} exited:\n${tail(log)}`);
    return (await ready().catch(() => false)) ? true : undefined;
  }, { timeoutMs, everyMs: 100 });
  return pid;
}

export async function startNode(l: ClusterLayout, n: NodeLayout, cp: ControlPlane): Promise<void> {
  for (const d of ["containerd/root", "containerd/state", "containerd/opt", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "manifests", "volume-plugins"]) {
    mkdirSync(join(n.dir, d), { recursive: true });
  }
  createCgroup(n.cgroupRoot);
  writeFileSync(join(n.dir, "cni", "net.d", "10-bridge.conflist"), JSON.stringify(cniConfig(n), null, 2) + "\n");
  const containerdToml = join(n.dir, "containerd", "config.toml");
  writeFileSync(containerdToml, containerdConfig(l, n));
  await daemon(l, n, "containerd", "containerd", ["--config", containerdToml], async () => existsSync(n.containerdSocket) && (await ctr(n, ["version"], { allowFail: true, timeoutMs: 3000 })).code === 0, 30_000);
  await importImage(n, l.pauseTar);

  const kubeletYaml = join(n.dir, "kubelet.yaml");
  const config = kubeletConfig(l, n, cp.pki.caCert) as Record<string, unknown>;
  if (cgroupV2()) delete config.failCgroupV1;
  writeFileSync(kubeletYaml, YAML.stringify(config));
  const kubeletKubeconfig = await cp.nodeKubeconfig(n.name, "kubelet");
  await daemon(l, n, "kubelet", join(l.binDir, "kubelet"), [
    `--config=${kubeletYaml}`,
    `--kubeconfig=${kubeletKubeconfig}`,
    `--root-dir=${join(n.dir, "kubelet")}`,
    `--cert-dir=${join(n.dir, "kubelet", "pki")}`,
    `--hostname-override=${n.name}`,
    `--node-ip=${n.ip}`,
    `--node-labels=locale2b.dev/test-cluster=${l.name}`,
  ], async () => (await run("nsenter", [`--net=${n.netnsPath}`, "--", "true"])).code === 0, 10_000);

  const proxyYaml = join(n.dir, "kube-proxy.yaml");
  writeFileSync(proxyYaml, YAML.stringify(kubeProxyConfig(l, n, await cp.nodeKubeconfig(n.name, "kube-proxy"))));
  await daemon(l, n, "kube-proxy", join(l.binDir, "kube-proxy"), [`--config=${proxyYaml}`], async () => true, 10_000);
}
