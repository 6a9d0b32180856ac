// The test cluster's control plane, on the host, listening on the cluster's bridge address only:
// etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager, kube-scheduler (built by
// scripts/k8s/build-binaries.sh). Certificates and kubeconfigs from pki.ts.
import { mkdirSync, readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { join } from "node:path";
import type { ClusterLayout } from "./layout.js";
import { createCA, issue, serviceAccountKeys, writeKubeconfig, type Pki } from "./pki.js";
import { alive, startDaemon, tail } from "./host.js";
import { waitForValue } from "../wait.js";

export interface Get {
  status: number;
  body: string;
}

/** GET over http or https; https with the cluster's CA and, when given, a client certificate. */
export function get(url: string, tls?: { ca?: string; cert?: string; key?: string; insecure?: boolean }): Promise<Get> {
  return new Promise((resolve, reject) => {
    const opts = {
      timeout: 3000,
      ...(url.startsWith("https:")
        ? {
            ca: tls?.ca ? readFileSync(tls.ca) : undefined,
            cert: tls?.cert ? readFileSync(tls.cert) : undefined,
            key: tls?.key ? readFileSync(tls.key) : undefined,
            rejectUnauthorized: !tls?.insecure,
          }
        : {}),
    };
    const req = (url.startsWith("https:") ? httpsRequest : httpRequest)(url, opts, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${url}: timed out`)));
    req.on("error", reject);
    req.end();
  });
}

/** Starts a control-plane component; throws with its log's tail if it dies or is not healthy in time. */
async function component(l: ClusterLayout, name: string, cmd: string, args: string[], healthy: () => Promise<boolean>, timeoutMs = 60_000): Promise<number> {
  const log = join(l.stateDir, "logs", `${name}.log`);
  const pid = await startDaemon(cmd, args, log);
  await waitForValue(`${name} to be healthy (log: ${log})`, async () => {
    if (!alive(pid)) throw new Error(`${name} exited:\n${tail(log)}`);
    return (await healthy().catch(() => false)) ? true : undefined;
  }, { timeoutMs, everyMs: 100 });
  return pid;
}

export interface ControlPlane {
  pki: Pki;
  /** Client certificate of the admin (system:masters). */
  admin: { cert: string; key: string };
  /** Files the nodes need: the CA, and a kubeconfig maker for their kubelets and kube-proxies. */
  nodeKubeconfig(node: string, kind: "kubelet" | "kube-proxy"): Promise<string>;
}

export interface ControlPlaneOptions {
  /**
   * etcd and kube-apiserver only: no controller-manager (nothing marks a silent node NotReady, makes
   * ServiceAccounts' defaults or runs Deployments) and no scheduler. For tests of the API alone, such as
   * simulated nodes (kwok) that need no kubelet.
   */
  apiserverOnly?: boolean;
}

export async function startControlPlane(l: ClusterLayout, opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const bin = (b: string) => join(l.binDir, b);
  mkdirSync(join(l.stateDir, "logs"), { recursive: true });
  const pki = await createCA(join(l.stateDir, "pki"));
  const apiserverDNS = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"];
  const serving = await issue(pki, "apiserver", { cn: "kube-apiserver", server: { dns: apiserverDNS, ips: [l.hostIP, l.kubernetesServiceIP, "127.0.0.1"] }, client: false });
  const kubeletClient = await issue(pki, "apiserver-kubelet-client", { cn: "kube-apiserver-kubelet-client", orgs: ["system:masters"] });
  const admin = await issue(pki, "admin", { cn: "admin", orgs: ["system:masters"] });
  const sa = await serviceAccountKeys(pki);
  const kubeconfig = async (file: string, cn: string, orgs: string[] = []) => {
    const client = await issue(pki, file, { cn, orgs });
    const path = join(l.stateDir, `${file}.kubeconfig`);
    writeKubeconfig(path, { server: l.apiserverURL, caCert: pki.caCert, client, user: cn });
    return path;
  };
  writeKubeconfig(l.kubeconfig, { server: l.apiserverURL, caCert: pki.caCert, client: admin, user: "admin" });
  const cmKubeconfig = await kubeconfig("controller-manager", "system:kube-controller-manager");
  const schedulerKubeconfig = await kubeconfig("scheduler", "system:kube-scheduler");

  await component(l, "etcd", "etcd", [
    "--name=default",
    `--data-dir=${join(l.stateDir, "etcd")}`,
    `--listen-client-urls=${l.etcdURL}`,
    `--advertise-client-urls=${l.etcdURL}`,
    `--listen-peer-urls=http://${l.hostIP}:2380`,
    `--initial-advertise-peer-urls=http://${l.hostIP}:2380`,
    `--initial-cluster=default=http://${l.hostIP}:2380`,
  ], async () => (await get(`${l.etcdURL}/health`)).body.includes('"health":"true"'));

  await component(l, "kube-apiserver", bin("kube-apiserver"), [
    `--etcd-servers=${l.etcdURL}`,
    `--bind-address=${l.hostIP}`,
    `--advertise-address=${l.hostIP}`,
    "--secure-port=6443",
    `--tls-cert-file=${serving.cert}`,
    `--tls-private-key-file=${serving.key}`,
    `--client-ca-file=${pki.caCert}`,
    `--service-cluster-ip-range=${l.serviceCIDR}`,
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    `--service-account-key-file=${sa.pub}`,
    `--service-account-signing-key-file=${sa.key}`,
    "--authorization-mode=Node,RBAC",
    "--enable-admission-plugins=NodeRestriction",
    "--allow-privileged=true",
    `--kubelet-client-certificate=${kubeletClient.cert}`,
    `--kubelet-client-key=${kubeletClient.key}`,
    "--kubelet-preferred-address-types=InternalIP",
    "--profiling=false",
  ], async () => (await get(`${l.apiserverURL}/readyz`, { ca: pki.caCert, cert: admin.cert, key: admin.key })).status === 200, 120_000);
  if (opts.apiserverOnly) return controlPlaneOf(l);

  await Promise.all([
    component(l, "kube-controller-manager", bin("kube-controller-manager"), [
      `--kubeconfig=${cmKubeconfig}`,
      `--authentication-kubeconfig=${cmKubeconfig}`,
      `--authorization-kubeconfig=${cmKubeconfig}`,
      `--bind-address=${l.hostIP}`,
      `--service-account-private-key-file=${sa.key}`,
      `--root-ca-file=${pki.caCert}`,
      "--use-service-account-credentials=true",
      `--cluster-cidr=${l.clusterCIDR}`,
      `--service-cluster-ip-range=${l.serviceCIDR}`,
      // A node whose kubelet stops renewing its Lease (every 5 s, node.ts) turns NotReady after 20 s, not 50.
      "--node-monitor-grace-period=20s",
      "--node-monitor-period=2s",
      "--leader-elect=false",
      "--profiling=false",
    ], async () => (await get(`https://${l.hostIP}:10257/healthz`, { insecure: true })).status === 200),
    component(l, "kube-scheduler", bin("kube-scheduler"), [
      `--kubeconfig=${schedulerKubeconfig}`,
      `--authentication-kubeconfig=${schedulerKubeconfig}`,
      `--authorization-kubeconfig=${schedulerKubeconfig}`,
      `--bind-address=${l.hostIP}`,
      "--leader-elect=false",
      "--profiling=false",
    ], async () => (await get(`https://${l.hostIP}:10259/healthz`, { insecure: true })).status === 200),
  ]);

  return controlPlaneOf(l);
}

/** The running control plane's certificates, from its state directory (for nodes started later). */
export function controlPlaneOf(l: ClusterLayout): ControlPlane {
  const dir = join(l.stateDir, "pki");
  const pki: Pki = { dir, caCert: join(dir, "ca.crt"), caKey: join(dir, "ca.key") };
  const kubeconfig = async (file: string, cn: string, orgs: string[] = []) => {
    const client = await issue(pki, file, { cn, orgs });
    const path = join(l.stateDir, `${file}.kubeconfig`);
    writeKubeconfig(path, { server: l.apiserverURL, caCert: pki.caCert, client, user: cn });
    return path;
  };
  return {
    pki,
    admin: { cert: join(dir, "admin.crt"), key: join(dir, "admin.key") },
    nodeKubeconfig: (node, kind) =>
      kind === "kubelet" ? kubeconfig(`kubelet-${node}`, `system:node:${node}`, ["system:nodes"]) : kubeconfig(`kube-proxy-${node}`, "system:kube-proxy"),
  };
}
