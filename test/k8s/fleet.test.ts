// @module-tag k8s: brings up a real Kubernetes cluster on this machine (test/helpers/k8s/) and runs the fleet on it
//
// The fleet deployed from deploy/kubernetes (kubectl apply -k, through a test overlay) on a real two-node
// cluster, with a Postgres on the host reached by the pods over TCP, driven with the real E2B JS SDK
// through the API's Service (a NodePort: ClusterIPs answer only from pods) and its pods' IPs: creates land
// on both nodes; the E2B JS and Python SDKs' suites through the Service (test/helpers/k8s/fleet-sdk-suites.ts);
// a sandbox on node2 streams through an API pod on node1; an API pod killed mid-stream (the
// command goes on; the SDK reattaches through the other replica); a node agent pod deleted (the DaemonSet
// starts another, which adopts the sandboxes); `kubectl cordon` (followed by the agent: no creates there);
// a node lost (its sandboxes answer "lost with node", creates go to the other); down leaves nothing.
// Skipped, saying why, as test/k8s/cluster.test.ts is, and without a PostgreSQL server or a built dist/.
import { existsSync } from "node:fs";
import { CoordinationV1Api, CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { Sandbox, type CommandHandle } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PgStore } from "../../control-plane/store/pg-store.js";
import { k8sMissing, k8sSkipReason } from "../helpers/k8s/binaries.js";
import { downCluster, kubectl, stopNode, upCluster, type Cluster } from "../helpers/k8s/cluster.js";
import { deployFleet, FLEET_NS as NS, fleetMissing, type K8sFleet } from "../helpers/k8s/fleet.js";
import { defineFleetSdkSuites } from "../helpers/k8s/fleet-sdk-suites.js";
import { waitForValue } from "../helpers/wait.js";
import { runCli } from "../helpers/cli.js";
import { postgresMissing } from "../helpers/postgres.js";

const skip = await k8sSkipReason(k8sMissing() ?? postgresMissing() ?? fleetMissing());
if (skip) console.warn(`test/k8s/fleet.test.ts skipped: ${skip}`);

describe.skipIf(skip !== undefined)(`the fleet on a real two-node Kubernetes cluster, deployed from deploy/kubernetes${skip ? ` [skipped: ${skip}]` : ""}`, () => {
  let cluster: Cluster | undefined;
  let core: CoreV1Api;
  let coordination: CoordinationV1Api;
  let fleet: K8sFleet | undefined;
  let store: PgStore | undefined;
  let db = "";
  let key = "";
  let down: string[] | undefined;
  const timings: Record<string, number> = {};
  const made: Sandbox[] = [];

  const ip = (node: string) => cluster!.layout.nodes.find((n) => n.name === node)!.ip;
  /** The API's Service, from the host: its NodePort on node1's address. */
  const service = () => fleet!.service;
  const sdk = (url: string) => ({ apiKey: key, apiUrl: url, sandboxUrl: url, requestTimeoutMs: 30_000 });
  const live = (p: V1Pod) => !p.metadata?.deletionTimestamp;
  const ready = (p: V1Pod) => live(p) && p.status?.phase === "Running" && !!p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True");
  const pods = async (name: string) => (await core.listNamespacedPod({ namespace: NS, labelSelector: `app.kubernetes.io/name=${name}` })).items.filter(live);
  const apiPodOn = async (node: string) => (await pods("locale2b-api")).find((p) => ready(p) && p.spec?.nodeName === node);
  const podUrl = (p: V1Pod) => `http://${p.status!.podIP}:3000`;
  const nodeOf = async (id: string) => (await store!.getSandbox(id))?.node;
  const fleetNodes = async () => {
    const r = await runCli(["nodes", "list", "--json"], { LOCALE2B_DATABASE_URL: db });
    if (r.code !== 0) throw new Error(r.stderr);
    return JSON.parse(r.stdout) as { name: string; status: string; url: string; capacity?: { sandboxes: number } }[];
  };
  const nodeStatus = async (name: string) => (await fleetNodes()).find((n) => n.name === name)?.status;
  /** The last lines of a node agent's log, for a failure's message. */
  const agentLog = async (node: string) => {
    const p = (await pods("locale2b-node")).find((x) => x.spec?.nodeName === node);
    return p ? (await kubectl(cluster!, ["-n", NS, "logs", "--tail", "40", p.metadata!.name!], { allowFail: true })).stdout : "(no pod)";
  };

  beforeAll(async () => {
    const t = Date.now();
    cluster = await upCluster({ name: `fl${process.pid}`, nodes: 2, replace: true });
    timings.clusterUp = Date.now() - t;
    const kc = new KubeConfig();
    kc.loadFromFile(cluster.kubeconfig);
    core = kc.makeApiClient(CoreV1Api);
    coordination = kc.makeApiClient(CoordinationV1Api);
    fleet = await deployFleet(cluster);
    key = fleet.apiKey;
    db = fleet.databaseUrl;
    store = await PgStore.open(db, { max: 2 });
    console.log(`fleet on Kubernetes: ${JSON.stringify({ ...timings, ...fleet.timings })}`);
  }, 900_000);

  afterAll(async () => {
    for (const s of made) await s.kill().catch(() => undefined);
    await store?.close();
    if (cluster && down === undefined) {
      const left = await downCluster(cluster.layout.stateDir);
      if (left.length) console.warn(`left behind: ${left.join("; ")}`);
    }
    await fleet?.postgres.stop();
    fleet?.cleanup();
  }, 180_000);

  it("the API Deployment spreads one replica per node, and both node agents join the fleet at their host's address", async () => {
    expect((await pods("locale2b-api")).map((p) => p.spec?.nodeName).sort()).toEqual(["node1", "node2"]);
    const nodes = await waitForValue("both nodes in the fleet", async () => {
      const n = await fleetNodes();
      return n.length === 2 ? n : undefined;
    }, { timeoutMs: 30_000, everyMs: 500 });
    expect(nodes.map((n) => [n.name, n.status, n.url])).toEqual([
      ["node1", "ready", `http://${ip("node1")}:3001`],
      ["node2", "ready", `http://${ip("node2")}:3001`],
    ]);
    // Each agent keeps its node's Lease renewed, held by its pod: what the API replicas judge liveness by.
    const agents = new Map((await pods("locale2b-node")).map((p) => [p.spec!.nodeName!, p.metadata!.name!]));
    const leases = await waitForValue("both nodes' Leases", async () => {
      const l = (await coordination.listNamespacedLease({ namespace: NS, labelSelector: "locale2b.dev/fleet-node" })).items;
      return l.length === 2 ? l : undefined;
    }, { timeoutMs: 30_000, everyMs: 500 });
    expect(leases.map((l) => [l.metadata?.name, l.metadata?.labels?.["locale2b.dev/fleet-node"], l.spec?.holderIdentity]).sort()).toEqual([
      ["locale2b-node-node1", "node1", agents.get("node1")],
      ["locale2b-node-node2", "node2", agents.get("node2")],
    ]);
    const first = new Date(leases[0]!.spec!.renewTime!).getTime();
    await waitForValue("a renewal of node1's Lease", async () => {
      const l = await coordination.readNamespacedLease({ namespace: NS, name: leases[0]!.metadata!.name! });
      return new Date(l.spec!.renewTime!).getTime() > first ? true : undefined;
    }, { timeoutMs: 30_000, everyMs: 500 });
    // A node answers only the replicas.
    const r = await fetch(`http://${ip("node1")}:3001/v2/sandboxes`, { headers: { "x-api-key": key } });
    expect(r.status).toBe(401);
  });

  it("creates through the Service land on both nodes, and each runs commands", async () => {
    const t = Date.now();
    made.push(...(await Promise.all([0, 1, 2, 3].map(() => Sandbox.create("base", { ...sdk(service()), timeoutMs: 600_000 })))));
    console.log(`4 creates through the Service in ${Date.now() - t} ms`);
    const where = await Promise.all(made.map((s) => nodeOf(s.sandboxId)));
    expect(new Set(where)).toEqual(new Set(["node1", "node2"]));
    for (const s of made) expect((await s.commands.run("echo hello from $(hostname)")).stdout).toBe(`hello from ${s.sandboxId}\n`);
  }, 180_000);

  // The E2B SDKs (JS and Python) through the Service, before the faults below take replicas and nodes away.
  defineFleetSdkSuites(() => ({ fleet: fleet!, nodeOf }));

  it("from inside a sandbox, as user and as root: no service-account token, no Kubernetes API, no node agent port, no Postgres", async () => {
    const l = cluster!.layout;
    const api = new URL(l.apiserverURL);
    const s = made[0]!;
    const targets = [
      [api.hostname, Number(api.port || 443)],
      [l.kubernetesServiceIP, 443],
      [ip(await nodeOf(s.sandboxId) as string), 3001],
      [l.hostIP, Number(new URL(db).port)],
    ] as const;
    const probe = `import os, socket
print("token" if os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token") else "no-token")
for host, port in ${JSON.stringify(targets)}:
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); print("REACHED", host, port)
    except OSError:
        print("refused", host, port)`;
    for (const user of ["user", "root"] as const) {
      await s.files.write("/tmp/k8s-probe.py", probe, { user });
      const r = await s.commands.run("python3 /tmp/k8s-probe.py", { user });
      expect(r.stdout, user).toMatch(/^no-token\n/);
      expect(r.stdout, user).not.toMatch(/REACHED/);
      expect(r.stdout.match(/refused/g)?.length, r.stdout).toBe(targets.length);
    }
  }, 60_000);

  it("a sandbox on node2 streams command output through an API pod on node1", async () => {
    const api1 = (await apiPodOn("node1"))!;
    expect(api1).toBeDefined();
    const on2 = made[(await Promise.all(made.map((s) => nodeOf(s.sandboxId)))).indexOf("node2")]!;
    const s = await Sandbox.connect(on2.sandboxId, sdk(podUrl(api1)));
    const seen: number[] = [];
    const r = await s.commands.run("for i in 1 2 3 4; do echo line $i; sleep 0.3; done", { onStdout: () => void seen.push(Date.now()) });
    expect(r.stdout).toBe("line 1\nline 2\nline 3\nline 4\n");
    expect(seen.length).toBeGreaterThanOrEqual(3); // streamed, not buffered at either hop
    expect(seen.at(-1)! - seen[0]!).toBeGreaterThan(500);
  }, 60_000);

  it("an API pod killed mid-stream: the command goes on, the SDK reattaches through the other replica, the Deployment replaces the pod", async () => {
    const api1 = (await apiPodOn("node1"))!;
    const api2 = (await apiPodOn("node2"))!;
    const s = await Sandbox.connect(made[0]!.sandboxId, sdk(podUrl(api1)));
    const before: string[] = [];
    const handle: CommandHandle = await s.commands.run("for i in $(seq 1 16); do echo tick $i; sleep 0.25; done", { background: true, onStdout: (d) => void before.push(d) });
    await waitForValue("two ticks through the API pod on node1", () => (before.join("").split("\n").length > 2 ? true : undefined), { timeoutMs: 10_000, everyMs: 50 });
    const t = Date.now();
    await core.deleteNamespacedPod({ name: api1.metadata!.name!, namespace: NS, gracePeriodSeconds: 0 });
    void handle.wait().catch(() => undefined); // its connection went with the pod
    const other = await Sandbox.connect(made[0]!.sandboxId, sdk(podUrl(api2)));
    const connected = Date.now() - t;
    const after: string[] = [];
    const again = await other.commands.connect(handle.pid, { onStdout: (d) => void after.push(d) });
    console.log(`after the kill: Sandbox.connect through the other replica in ${connected} ms, commands.connect ${Date.now() - t - connected} ms later`);
    const done = await again.wait();
    expect(done.exitCode).toBe(0);
    expect(after.join("")).toMatch(/tick 16\n$/);
    console.log(`the command ended ${Date.now() - t} ms after the kill; before: ${before.join("").trim().split("\n").length} ticks, after: ${after.join("").trim().split("\n").length}`);
    // The Service: the next SDK calls work at once through the surviving endpoints.
    const t2 = Date.now();
    const viaService = await Sandbox.connect(made[0]!.sandboxId, sdk(service()));
    expect((await viaService.commands.run("echo through the service")).stdout).toBe("through the service\n");
    console.log(`through the Service ${Date.now() - t2} ms later`);
    await waitForValue("a replacement API pod, Ready", async () => ((await pods("locale2b-api")).filter(ready).length === 2 ? true : undefined), { timeoutMs: 60_000, everyMs: 250 });
    console.log(`API Deployment back to 2 ready replicas ${Date.now() - t} ms after the kill`);
  }, 120_000);

  it("a node agent pod deleted: the DaemonSet starts another, which adopts the node's sandboxes (they outlive the pod)", async () => {
    const ids = (await Promise.all(made.map(async (s) => ((await nodeOf(s.sandboxId)) === "node2" ? s : undefined)))).filter((s): s is Sandbox => !!s);
    expect(ids.length).toBeGreaterThan(0);
    // A process started before the restart must still be there after it.
    await ids[0]!.commands.run("echo before > /tmp/mark; sleep 3600 >/dev/null 2>&1 &");
    const agent = (await pods("locale2b-node")).find((p) => p.spec?.nodeName === "node2")!;
    const t = Date.now();
    await core.deleteNamespacedPod({ name: agent.metadata!.name!, namespace: NS });
    await waitForValue("a new node agent pod on node2, Ready", async () => {
      const p = (await pods("locale2b-node")).find((x) => x.spec?.nodeName === "node2");
      return p && p.metadata?.name !== agent.metadata?.name && ready(p) ? p : undefined;
    }, { timeoutMs: 120_000, everyMs: 250 });
    console.log(`node agent pod replaced and Ready ${Date.now() - t} ms after its deletion`);
    const api = (await apiPodOn("node1"))!;
    for (const s of ids) {
      const back = await Sandbox.connect(s.sandboxId, sdk(podUrl(api)));
      const r = await back.commands.run("cat /tmp/mark 2>/dev/null; pgrep -c -x sleep || true");
      if (s === ids[0]) expect(r.stdout).toBe("before\n1\n");
    }
    console.log(`all ${ids.length} sandboxes of node2 answer ${Date.now() - t} ms after the deletion`);
  }, 180_000);

  it("kubectl cordon: the node agent follows its Node, the fleet places nothing there; uncordon undoes it", async () => {
    let t = Date.now();
    await kubectl(cluster!, ["cordon", "node2"]);
    await waitForValue("node2 cordoned in the fleet", async () => ((await nodeStatus("node2")) === "cordoned" ? true : undefined), { timeoutMs: 30_000, everyMs: 250 }).catch(async (e: Error) => {
      throw new Error(`${e.message}\nnode2's agent says:\n${await agentLog("node2")}`);
    });
    console.log(`kubectl cordon → fleet node cordoned in ${Date.now() - t} ms`);
    const more = await Promise.all([0, 1, 2].map(() => Sandbox.create("base", { ...sdk(service()), timeoutMs: 600_000 })));
    made.push(...more);
    expect(await Promise.all(more.map((s) => nodeOf(s.sandboxId)))).toEqual(["node1", "node1", "node1"]);
    t = Date.now();
    await kubectl(cluster!, ["uncordon", "node2"]);
    await waitForValue("node2 ready in the fleet", async () => ((await nodeStatus("node2")) === "ready" ? true : undefined), { timeoutMs: 30_000, everyMs: 250 });
    console.log(`kubectl uncordon → fleet node ready in ${Date.now() - t} ms`);
  }, 180_000);

  it("a node lost: its sandboxes answer 'lost with node node2', creates go to node1", async () => {
    const api = (await apiPodOn("node1"))!;
    const lost = (await Promise.all(made.map(async (s) => ((await nodeOf(s.sandboxId)) === "node2" ? s : undefined)))).find((s) => !!s)!;
    expect(lost).toBeDefined();
    const t = Date.now();
    await stopNode(cluster!, "node2");
    const message = await waitForValue("the sandbox on node2 to answer 'lost'", async () => {
      const r = await fetch(`${podUrl(api)}/sandboxes/${lost.sandboxId}`, { headers: { "x-api-key": key } });
      const body = await r.text();
      return r.status === 503 && /lost with node/.test(body) ? body : undefined;
    }, { timeoutMs: 60_000, everyMs: 500 });
    expect(message).toMatch(new RegExp(`sandbox ${lost.sandboxId} was lost with node 'node2': no Lease renewal for \\d+ s`));
    console.log(`node2 lost → its sandbox answers 503 'lost' ${Date.now() - t} ms later`);
    const s = await Sandbox.connect(lost.sandboxId, sdk(podUrl(api))).catch((e: Error) => e);
    const err = s instanceof Error ? s : await s.commands.run("true").catch((e: Error) => e);
    expect(String(err)).toMatch(/lost with node 'node2'/);
    const more = await Promise.all([0, 1].map(() => Sandbox.create("base", { ...sdk(podUrl(api)), timeoutMs: 600_000 })));
    made.push(...more);
    expect(await Promise.all(more.map((x) => nodeOf(x.sandboxId)))).toEqual(["node1", "node1"]);
    expect((await more[0]!.commands.run("echo still serving")).stdout).toBe("still serving\n");
  }, 180_000);

  it("down stops everything and leaves nothing behind", async () => {
    for (const s of made) await s.kill().catch(() => undefined);
    made.length = 0;
    const l = cluster!.layout;
    const t = Date.now();
    down = await downCluster(l.stateDir);
    console.log(`down in ${Date.now() - t} ms`);
    expect(down).toEqual([]);
    expect(existsSync(l.stateDir)).toBe(false);
  }, 180_000);
});
