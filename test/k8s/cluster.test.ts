// @module-tag k8s: brings up a real Kubernetes cluster on this machine (test/helpers/k8s/)
//
// The test cluster the fleet's tests run on: etcd, kube-apiserver, controller-manager and scheduler, and
// two real nodes (containerd + kubelet + kube-proxy, each node in its own network namespace), images built
// here and imported into containerd. On it: a 2-replica Deployment of a busybox HTTP server spreads one pod
// per node; a pod on node1 reaches the pod on node2 over the pod network, and both through a Service's
// ClusterIP; a cordoned node gets no new pod; a lost node turns NotReady and comes back; `down` leaves
// nothing behind.
// Skipped, saying why, where the machine lacks root, the Debian packages (scripts/k8s/setup-host.sh) or Go
// to build the binaries with. The first run builds the binaries (scripts/k8s/build-binaries.sh: about 15-25
// minutes of one core, cached in ~/.cache/locale2b/k8s); `npx vitest run --tagsFilter k8s` runs only this.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppsV1Api, CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { k8sMissing, k8sSkipReason } from "../helpers/k8s/binaries.js";
import { downCluster, importImage, kubectl, notReadyNodes, startNodeAgain, stopNode, upCluster, type Cluster } from "../helpers/k8s/cluster.js";
import { get } from "../helpers/k8s/control-plane.js";
import { waitForValue } from "../helpers/wait.js";
import { busyboxImage, busyboxMissing } from "../helpers/k8s/image.js";

const skip = await k8sSkipReason(k8sMissing() ?? busyboxMissing());
if (skip) console.warn(`test/k8s/cluster.test.ts skipped: ${skip}`);

const NAMESPACE = "default";
const IMAGE = "locale2b.local/web:1";
const APP = "web";

describe.skipIf(skip !== undefined)(`a real two-node Kubernetes cluster on this machine${skip ? ` [skipped: ${skip}]` : ""}`, () => {
  let cluster: Cluster | undefined;
  let core: CoreV1Api;
  let apps: AppsV1Api;
  let down: string[] | undefined;
  let work = "";

  const pods = async (): Promise<V1Pod[]> => (await core.listNamespacedPod({ namespace: NAMESPACE, labelSelector: `app=${APP}` })).items.filter((p) => !p.metadata?.deletionTimestamp);
  const ready = (p: V1Pod) => p.status?.phase === "Running" && !!p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True");
  // busybox 1.35's `wget -T` segfaults: its own `timeout` applet bounds the request instead.
  const fetchIn = (pod: string, url: string, seconds = 5) => exec(pod, ["timeout", String(seconds), "wget", "-qO-", url]);
  const exec = async (pod: string, cmd: string[]) => (await kubectl(cluster!, ["exec", "-n", NAMESPACE, pod, "--", ...cmd], { timeoutMs: 20_000 })).stdout.trim();

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "locale2b-k8s-test-"));
    cluster = await upCluster({ name: `vt${process.pid}`, nodes: 2, replace: true });
    console.log(`cluster up in ${cluster.timings.total} ms: ${JSON.stringify(cluster.timings)}`);
    const kc = new KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    core = kc.makeApiClient(CoreV1Api);
    apps = kc.makeApiClient(AppsV1Api);
    const t = Date.now();
    const tar = await busyboxImage({ ref: IMAGE, out: join(work, "web.tar") });
    await importImage(cluster, tar);
    console.log(`web image built and imported into both nodes in ${Date.now() - t} ms`);
  }, 600_000);

  afterAll(async () => {
    if (cluster && down === undefined) await downCluster(cluster.layout.stateDir);
    if (work) rmSync(work, { recursive: true, force: true });
  }, 120_000);

  it("has two Ready nodes, each in its own network namespace", async () => {
    const nodes = (await core.listNode()).items;
    expect(nodes.map((n) => n.metadata?.name).sort()).toEqual(["node1", "node2"]);
    for (const n of nodes) {
      expect(n.status?.conditions?.find((c) => c.type === "Ready")?.status).toBe("True");
      expect(n.status?.nodeInfo?.kubeletVersion).toBe("v1.36.1");
      expect(n.status?.addresses?.find((a) => a.type === "InternalIP")?.address).toBe(cluster!.layout.nodes.find((x) => x.name === n.metadata?.name)!.ip);
    }
  });

  it("spreads a 2-replica Deployment of a locally built image one pod per node", async () => {
    await core.createNamespacedService({
      namespace: NAMESPACE,
      body: { metadata: { name: APP }, spec: { selector: { app: APP }, ports: [{ port: 80, targetPort: 8080 }] } },
    });
    const t = Date.now();
    await apps.createNamespacedDeployment({
      namespace: NAMESPACE,
      body: {
        metadata: { name: APP },
        spec: {
          replicas: 2,
          selector: { matchLabels: { app: APP } },
          template: {
            metadata: { labels: { app: APP } },
            spec: {
              terminationGracePeriodSeconds: 1,
              // One pod per node, deterministically: the spread constraint makes it a rule (a preferred
              // anti-affinity alone is a score, and placed both pods on one node in a run), and once node2 is
              // cordoned (tainted unschedulable) it no longer counts as a domain, so node1 takes both.
              topologySpreadConstraints: [
                { maxSkew: 1, topologyKey: "kubernetes.io/hostname", whenUnsatisfiable: "DoNotSchedule", nodeTaintsPolicy: "Honor", labelSelector: { matchLabels: { app: APP } } },
              ],
              affinity: {
                podAntiAffinity: {
                  preferredDuringSchedulingIgnoredDuringExecution: [
                    { weight: 100, podAffinityTerm: { topologyKey: "kubernetes.io/hostname", labelSelector: { matchLabels: { app: APP } } } },
                  ],
                },
              },
              containers: [
                {
                  name: "web",
                  image: IMAGE,
                  imagePullPolicy: "Never",
                  command: ["/bin/sh", "-c", "hostname > /www/index.html && exec httpd -f -p 8080 -h /www"],
                  ports: [{ containerPort: 8080 }],
                  readinessProbe: { httpGet: { path: "/", port: 8080 }, periodSeconds: 1 },
                },
              ],
            },
          },
        },
      },
    });
    const running = await waitForValue("two Ready web pods", async () => {
      const ps = await pods();
      return ps.length === 2 && ps.every(ready) ? ps : undefined;
    }, { timeoutMs: 90_000, everyMs: 250 });
    console.log(`2 pods Ready ${Date.now() - t} ms after the Deployment was created`);
    expect(running.map((p) => p.spec?.nodeName).sort()).toEqual(["node1", "node2"]);
  }, 120_000);

  it("a pod on node1 reaches the pod on node2 over the pod network, and the host reaches both", async () => {
    const ps = await pods();
    const on1 = ps.find((p) => p.spec?.nodeName === "node1")!;
    const on2 = ps.find((p) => p.spec?.nodeName === "node2")!;
    const ip1 = on1.status!.podIP!;
    const ip2 = on2.status!.podIP!;
    expect(ip1.startsWith(cluster!.layout.nodes[0]!.podCIDR.split(".").slice(0, 3).join("."))).toBe(true);
    expect(ip2.startsWith(cluster!.layout.nodes[1]!.podCIDR.split(".").slice(0, 3).join("."))).toBe(true);
    expect(await fetchIn(on1.metadata!.name!, `http://${ip2}:8080/`)).toBe(on2.metadata!.name);
    expect(await fetchIn(on2.metadata!.name!, `http://${ip1}:8080/`)).toBe(on1.metadata!.name);
    expect((await get(`http://${ip2}:8080/`)).body.trim()).toBe(on2.metadata!.name);
  }, 60_000);

  it("a Service's ClusterIP reaches the pods on both nodes (kube-proxy in each node's namespace)", async () => {
    const svc = await core.readNamespacedService({ name: APP, namespace: NAMESPACE });
    const clusterIP = svc.spec!.clusterIP!;
    const ps = await pods();
    const from = ps.find((p) => p.spec?.nodeName === "node1")!.metadata!.name!;
    const seen = new Set<string>();
    await waitForValue("answers from both pods through the ClusterIP", async () => {
      const out = await fetchIn(from, `http://${clusterIP}/`, 3).catch(() => "");
      if (out) seen.add(out);
      return seen.size === 2 ? true : undefined;
    }, { timeoutMs: 45_000, everyMs: 100 });
    expect([...seen].sort()).toEqual(ps.map((p) => p.metadata!.name!).sort());
  }, 60_000);

  it("a cordoned node gets no new pod: the replacement lands on node1", async () => {
    const node2 = await core.readNode({ name: "node2" });
    node2.spec = { ...node2.spec, unschedulable: true };
    await core.replaceNode({ name: "node2", body: node2 });
    const victim = (await pods()).find((p) => p.spec?.nodeName === "node2")!;
    await core.deleteNamespacedPod({ name: victim.metadata!.name!, namespace: NAMESPACE, gracePeriodSeconds: 0 });
    const after = await waitForValue("two Ready web pods again, none on the cordoned node2", async () => {
      const ps = await pods();
      return ps.length === 2 && ps.every(ready) && !ps.some((p) => p.metadata?.name === victim.metadata?.name) ? ps : undefined;
    }, { timeoutMs: 60_000, everyMs: 250 });
    expect(after.map((p) => p.spec?.nodeName)).toEqual(["node1", "node1"]);
  }, 90_000);

  it("a lost node turns NotReady, and comes back Ready when started again", async () => {
    const l = cluster!.layout;
    let t = Date.now();
    await stopNode(cluster!, "node2");
    await waitForValue("node2 NotReady", async () => ((await notReadyNodes(l)).includes("node2") ? true : undefined), { timeoutMs: 60_000, everyMs: 500 });
    console.log(`node2 NotReady ${Date.now() - t} ms after it was lost`);
    t = Date.now();
    await startNodeAgain(cluster!, "node2");
    console.log(`node2 Ready again ${Date.now() - t} ms after its start`);
    expect(await notReadyNodes(l)).toEqual([]);
  }, 150_000);

  it("down stops everything and leaves nothing behind", async () => {
    const l = cluster!.layout;
    const t = Date.now();
    down = await downCluster(l.stateDir);
    console.log(`down in ${Date.now() - t} ms`);
    expect(down).toEqual([]);
    expect(existsSync(l.stateDir)).toBe(false);
    for (const n of l.nodes) expect(existsSync(n.netnsPath)).toBe(false);
  }, 120_000);
});
