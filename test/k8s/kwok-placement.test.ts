// @module-tag k8s: a real apiserver on this machine (test/helpers/k8s/) with 100 Nodes simulated by kwok
//
// Placement (control-plane/fleet/placement.ts) as an API replica in Kubernetes does it, at 100 nodes: etcd +
// kube-apiserver only (no kubelets, no controller-manager), kwok keeping 100 Nodes Ready, a Postgres store with
// 100 node records (capacities varied) heartbeating, a Lease per node renewed by the project's NodeLease with the
// node agents' service account (deploy/kubernetes/rbac.yaml), and a KubernetesNodes reading Leases and Nodes
// with the API replicas' service account. Creates are `place()` over `view(listNodes())` with `nodeLoads()`,
// each written to the store as a sandbox record on its node. Every step asserts where the creates went:
// 1000 spread within one of even; `kubectl cordon` of 10 Nodes, 10 Nodes NotReady (kwok no longer manages
// them, their Ready condition False), 10 nodes whose Leases stop being renewed (lost after NODE_LOST_MS), and
// 10 full nodes each get none; with the apiserver unreachable (SIGSTOPped) for longer than NODE_LOST_MS/2 the
// view falls back to the store's heartbeats (Nodes last seen cordoned or NotReady stay out), and judges by
// Kubernetes again once it answers; 10 Nodes labelled locale2b.dev/sandboxes=false get none (and some again
// once the label goes).
// Skipped, saying why, as test/k8s/cluster.test.ts is, without a PostgreSQL server, or when kwok cannot be
// built (scripts/k8s/build-kwok.sh: Go and the module proxy; cached in ~/.cache/locale2b/k8s-kwok).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NODE_LOST_MS } from "../../control-plane/domain/node.js";
import type { InCluster } from "../../control-plane/fleet/kubernetes-client.js";
import { KubernetesNodes, SANDBOXES_LABEL } from "../../control-plane/fleet/kubernetes-nodes.js";
import { PgStore } from "../../control-plane/store/pg-store.js";
import { k8sMissing, k8sSkipReason, REPO } from "../helpers/k8s/binaries.js";
import { downCluster, kubectl, upCluster, type Cluster } from "../helpers/k8s/cluster.js";
import { processes } from "../helpers/k8s/host.js";
import { waitForValue } from "../helpers/wait.js";
import { cachedKwok, fakeNode, KWOK_ANNOTATION, kwokSkipReason, startKwok, writeList } from "../helpers/k8s/kwok.js";
import { nodeRecord, SimulatedFleet } from "../helpers/k8s/simulated-fleet.js";
import { postgresMissing, startPostgres, type TestPostgres } from "../helpers/postgres.js";

const skip = (await k8sSkipReason(k8sMissing() ?? postgresMissing())) ?? (await kwokSkipReason());
if (skip) console.warn(`test/k8s/kwok-placement.test.ts skipped: ${skip}`);

const NS = "locale2b";
const N = 100;
const names = Array.from({ length: N }, (_, i) => `kwok-node-${String(i).padStart(3, "0")}`);
const range = (from: number, to: number) => names.slice(from, to);
const CORDONED = range(10, 20);
const NOT_READY = range(20, 30);
/** Their Leases stop; their store heartbeats go on (the agent lost its API access). */
const LEASE_ONLY = range(30, 35);
/** Their Leases and store heartbeats stop (the node died). */
const SILENT = range(35, 40);
const FULL = range(40, 50);

/**
 * A burst's creates: on `eligible` only, every one of them; and the eligible nodes' sandboxes (`totals`, all the
 * fleet's creates so far) within one of each other. (The burst's own counts may differ by two: it evens out what the
 * nodes held, which differed by one, and equal nodes are taken in a random order.)
 */
function expectSpread(got: Map<string, number>, eligible: string[], totals: Map<string, number>): void {
  const outside = [...got.keys()].filter((n) => !eligible.includes(n));
  expect(outside, "creates placed outside the eligible nodes").toEqual([]);
  expect([...got.keys()].sort()).toEqual([...eligible].sort());
  expect(Math.max(...got.values()) - Math.min(...got.values())).toBeLessThanOrEqual(2);
  const held = eligible.map((n) => totals.get(n) ?? 0);
  expect(Math.max(...held) - Math.min(...held), `sandboxes per eligible node: ${held.join(" ")}`).toBeLessThanOrEqual(1);
}

describe.skipIf(skip !== undefined)(`placement over 100 kwok-simulated Kubernetes Nodes, judged by Leases and Node conditions${skip ? ` [skipped: ${skip}]` : ""}`, () => {
  let cluster: Cluster | undefined;
  let pg: TestPostgres | undefined;
  let store: PgStore | undefined;
  /** Sandboxes per node, as the store counts them. */
  const totals = async () => new Map((await store!.nodeLoads()).map((l) => [l.node, l.sandboxes]));
  let nodes: KubernetesNodes | undefined;
  let fleet: SimulatedFleet | undefined;
  let work = "";
  let apiserverPid = 0;
  const logged: { level: number; msg: string }[] = [];
  const timings: Record<string, number> = {};
  const without = (...sets: string[][]) => names.filter((n) => !sets.some((s) => s.includes(n)));

  /** A service account's credentials as a pod has them (InCluster): a TokenRequest token, the CA, the namespace. */
  const credentials = async (account: string): Promise<InCluster> => ({
    server: cluster!.layout.apiserverURL,
    token: (await kubectl(cluster!, ["-n", NS, "create", "token", account, "--duration=2h"])).stdout.trim(),
    ca: readFileSync(join(cluster!.layout.stateDir, "pki", "ca.crt")),
    namespace: NS,
  });
  const view = async () => nodes!.view(await store!.listNodes());
  const nodeConditions = async () => {
    const list = JSON.parse((await kubectl(cluster!, ["get", "nodes", "-o", "json"])).stdout) as {
      items: { metadata: { name: string }; status?: { conditions?: { type: string; status: string }[] } }[];
    };
    return new Map(list.items.map((i) => [i.metadata.name, i.status?.conditions?.find((c) => c.type === "Ready")?.status]));
  };

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "locale2b-kwok-"));
    let t = Date.now();
    cluster = await upCluster({ name: `kw${process.pid}`, nodes: 0, apiserverOnly: true, replace: true });
    timings.apiserverUp = Date.now() - t;
    const apiserver = processes().find((p) => p.cmdline.startsWith(join(cluster!.layout.binDir, "kube-apiserver")) && p.cmdline.includes(cluster!.layout.stateDir + "/"));
    if (!apiserver || apiserver.pid <= 1) throw new Error(`no kube-apiserver process of ${cluster.layout.stateDir}`);
    apiserverPid = apiserver.pid;

    t = Date.now();
    await startKwok(cluster, cachedKwok()!);
    await kubectl(cluster, ["create", "-f", writeList(join(work, "nodes.json"), names.map((n) => fakeNode(n)))]);
    await waitForValue("kwok to make all 100 Nodes Ready", async () => ([...(await nodeConditions()).values()].filter((s) => s === "True").length === N ? true : undefined), { timeoutMs: 120_000, everyMs: 500 });
    timings.kwok100NodesReady = Date.now() - t;

    // The fleet's own RBAC, as deployed: the agents' account keeps Leases, the replicas' lists them and Nodes.
    await kubectl(cluster, ["apply", "-f", join(REPO, "deploy", "kubernetes", "namespace.yaml")]);
    await kubectl(cluster, ["-n", NS, "apply", "-f", join(REPO, "deploy", "kubernetes", "rbac.yaml")]);
    const [agent, replica] = [await credentials("locale2b-node"), await credentials("locale2b-api")];

    t = Date.now();
    pg = await startPostgres();
    store = await PgStore.open(await pg.database("kwok"), { max: 4 });
    const log = pino({ level: "info" }, { write: (line: string) => void logged.push(JSON.parse(line) as { level: number; msg: string }) });
    nodes = new KubernetesNodes({ cluster: replica, log });
    fleet = new SimulatedFleet({ store, cluster: agent, nodes, log });
    // Capacities vary in memory (64 to 120 GiB, room for 128 to 240 sandboxes of 512 MiB) and the sandbox count
    // binds (100 each): an even spread is right.
    await fleet.start(names.map((n, i) => nodeRecord(n, i, { maxSandboxes: 100, memoryBudgetMB: (64 + 8 * (i % 8)) * 1024 })));
    await nodes.start();
    timings.storeAndLeases = Date.now() - t;
    console.log(`kwok placement setup (ms): ${JSON.stringify(timings)}`);
  }, 900_000);

  afterAll(async () => {
    if (apiserverPid > 1) process.kill(apiserverPid, "SIGCONT");
    await nodes?.stop();
    await fleet?.stop();
    await store?.close();
    await pg?.stop();
    if (cluster) {
      const left = await downCluster(cluster.layout.stateDir);
      if (left.length) console.warn(`left behind: ${left.join("; ")}`);
      expect(left).toEqual([]);
    }
    if (work) rmSync(work, { recursive: true, force: true });
  }, 180_000);

  it("judges all 100 nodes live (their Leases) and ready (their Nodes), and spreads 1000 creates within one of even", async () => {
    const v = await view();
    expect(v.map((n) => n.name)).toEqual(names);
    expect(v.filter((n) => n.state === "ready" && Date.now() - n.heartbeatAt <= NODE_LOST_MS)).toHaveLength(N);
    const t = Date.now();
    const got = await fleet!.create(1000);
    console.log(`1000 placements over 100 nodes in ${Date.now() - t} ms`);
    expectSpread(got, names, await totals());
    expect(Math.min(...got.values())).toBe(10);
  }, 600_000);

  it("places nothing on 10 cordoned Nodes (kubectl cordon), seen from the Nodes' watch (no list since the first)", async () => {
    const before = nodes!.watchStats();
    await kubectl(cluster!, ["cordon", ...CORDONED]);
    await waitForValue("the view to show the 10 Nodes cordoned", async () => {
      const cordoned = (await view()).filter((n) => n.state === "cordoned").map((n) => n.name);
      return cordoned.length === 10 && CORDONED.every((n) => cordoned.includes(n)) ? true : undefined;
    }, { timeoutMs: 30_000, everyMs: 250 });
    // The cordons came as watch events.
    const after = nodes!.watchStats();
    expect(after.nodes.lists, "the Nodes were listed again").toBe(1);
    expect(after.nodes.events - before.nodes.events).toBeGreaterThanOrEqual(10);
    expectSpread(await fleet!.create(180), without(CORDONED), await totals());
  }, 300_000);

  it("places nothing on 10 NotReady Nodes (kwok no longer manages them; their Ready condition False)", async () => {
    for (const n of NOT_READY) {
      await kubectl(cluster!, ["annotate", "node", n, `${KWOK_ANNOTATION}-`]);
      // What the node lifecycle controller writes for a kubelet that stopped posting status.
      const status = { status: { conditions: [{ type: "Ready", status: "False", reason: "KubeletNotReady", message: "simulated: kwok no longer manages this Node" }] } };
      await kubectl(cluster!, ["patch", "node", n, "--subresource=status", "--type=strategic", "-p", JSON.stringify(status)]);
    }
    await waitForValue("the view to show the 10 Nodes not ready", async () => {
      const notReady = (await view()).filter((n) => n.state === "cordoned").map((n) => n.name);
      return NOT_READY.every((n) => notReady.includes(n)) ? true : undefined;
    }, { timeoutMs: 30_000, everyMs: 250 });
    expectSpread(await fleet!.create(160), without(CORDONED, NOT_READY), await totals());
    // kwok left them alone meanwhile (it would make a managed Node Ready again at once).
    const ready = await nodeConditions();
    expect(NOT_READY.map((n) => ready.get(n))).toEqual(NOT_READY.map(() => "False"));
    expect(without(NOT_READY).filter((n) => ready.get(n) !== "True")).toEqual([]);
  }, 300_000);

  it("judges 10 nodes whose Leases stop being renewed lost after NODE_LOST_MS, and places nothing there", async () => {
    const t = Date.now();
    await fleet!.silence(LEASE_ONLY, { heartbeats: true });
    await fleet!.silence(SILENT, { heartbeats: false });
    const lost = await waitForValue("the 10 nodes to be judged lost", async () => {
      const now = Date.now();
      const gone = (await view()).filter((n) => now - n.heartbeatAt > NODE_LOST_MS).map((n) => n.name);
      return gone.length === 10 ? gone : undefined;
    }, { timeoutMs: NODE_LOST_MS + 60_000, everyMs: 500 });
    console.log(`Leases stopped → 10 nodes judged lost ${Date.now() - t} ms later (NODE_LOST_MS ${NODE_LOST_MS})`);
    expect(lost.sort()).toEqual([...LEASE_ONLY, ...SILENT].sort());
    expect(nodes!.silence()).toBe("no Lease renewal");
    // The other 90 stayed live by their renewals, which came as watch events (at least one each in 15 s), not lists.
    const stats = nodes!.watchStats().leases;
    expect(stats.lists, "the Leases were listed again").toBe(1);
    expect(stats.events).toBeGreaterThanOrEqual(N - 10);
    // The store's heartbeats of LEASE_ONLY are fresh: the Lease is what counts.
    const records = await store!.listNodes();
    for (const n of LEASE_ONLY) expect(Date.now() - records.find((r) => r.name === n)!.heartbeatAt).toBeLessThanOrEqual(NODE_LOST_MS);
    expectSpread(await fleet!.create(140), without(CORDONED, NOT_READY, LEASE_ONLY, SILENT), await totals());
  }, 300_000);

  it("places nothing on 10 full nodes", async () => {
    const loads = new Map((await store!.nodeLoads()).map((l) => [l.node, l.sandboxes]));
    for (const n of FULL) await fleet!.setCapacity(n, { maxSandboxes: loads.get(n)! });
    expectSpread(await fleet!.create(120), without(CORDONED, NOT_READY, LEASE_ONLY, SILENT, FULL), await totals());
  }, 300_000);

  it("with the apiserver unreachable for longer than NODE_LOST_MS/2 falls back to the store's heartbeats, and judges by Kubernetes again once it answers", async () => {
    const warnings = () => logged.filter((l) => /cannot read the fleet's Leases and Nodes/.test(l.msg)).length;
    const before = warnings();
    const t = Date.now();
    process.kill(apiserverPid, "SIGSTOP");
    try {
      // Its last read is older than NODE_LOST_MS/2, and a read has failed (each fails after its 5 s timeout).
      await waitForValue("the view to stop judging by Kubernetes", () => (!nodes!.current() && warnings() > before ? true : undefined), { timeoutMs: NODE_LOST_MS + 30_000, everyMs: 250 });
      timings.outageToFallback = Date.now() - t;
      expect(nodes!.silence()).toBe("no heartbeat");
      // The SILENT nodes' store heartbeats are stale too by now (they stopped with their Leases).
      await waitForValue("the silent nodes' store heartbeats to be stale", async () => {
        const now = Date.now();
        return (await view()).filter((n) => SILENT.includes(n.name)).every((n) => now - n.heartbeatAt > NODE_LOST_MS) ? true : undefined;
      }, { timeoutMs: NODE_LOST_MS + 10_000, everyMs: 500 });
      // The store's heartbeats stand in for the Leases, so LEASE_ONLY (whose store heartbeats go on) take creates
      // again beside the eligible nodes, and being the emptiest (they missed the creates since) each takes some;
      // the Nodes last seen cordoned or NotReady stay out, the dead (SILENT: no store heartbeat) and the full get none.
      const got = await fleet!.create(100);
      const takers = [...got.keys()];
      for (const n of LEASE_ONLY) expect(takers).toContain(n);
      expect(takers.filter((n) => [...CORDONED, ...NOT_READY, ...SILENT, ...FULL].includes(n))).toEqual([]);
      expect(takers.every((n) => [...LEASE_ONLY, ...without(CORDONED, NOT_READY, LEASE_ONLY, SILENT, FULL)].includes(n))).toBe(true);
      expect(nodes!.current()).toBe(false);
    } finally {
      process.kill(apiserverPid, "SIGCONT");
    }
    const back = Date.now();
    await waitForValue("the view to judge by Kubernetes again, all but the 10 silent nodes live", async () => {
      if (!nodes!.current()) return undefined;
      const now = Date.now();
      const gone = (await view()).filter((n) => now - n.heartbeatAt > NODE_LOST_MS).map((n) => n.name);
      return gone.length === 10 ? true : undefined;
    }, { timeoutMs: 60_000, everyMs: 250 });
    timings.backToKubernetes = Date.now() - back;
    console.log(`apiserver stopped → store fallback ${timings.outageToFallback} ms; answering again → judged by Kubernetes ${timings.backToKubernetes} ms`);
    expect(nodes!.silence()).toBe("no Lease renewal");
    expect(warnings()).toBe(before + 1); // logged once for the whole outage, not at every failed read
    expect(logged.some((l) => /reading the fleet's Leases and Nodes works again/.test(l.msg))).toBe(true);
    const eligible = without(CORDONED, NOT_READY, LEASE_ONLY, SILENT, FULL);
    expectSpread(await fleet!.create(eligible.length * 2), eligible, await totals());
  }, 300_000);

  it("places nothing on 10 Nodes labelled locale2b.dev/sandboxes=false (still Ready and schedulable), and on them again once the label goes", async () => {
    const eligible = without(CORDONED, NOT_READY, LEASE_ONLY, SILENT, FULL);
    const labelled = eligible.slice(0, 10);
    await kubectl(cluster!, ["label", "node", ...labelled, `${SANDBOXES_LABEL}=false`]);
    await waitForValue("the view to keep the 10 labelled Nodes out", async () => {
      const out = (await view()).filter((n) => n.state === "cordoned").map((n) => n.name);
      return labelled.every((n) => out.includes(n)) ? true : undefined;
    }, { timeoutMs: 30_000, everyMs: 250 });
    // Kubernetes still schedules pods there: only the fleet leaves them alone.
    const list = JSON.parse((await kubectl(cluster!, ["get", "nodes", ...labelled, "-o", "json"])).stdout) as { items: { spec?: { unschedulable?: boolean } }[] };
    expect(list.items.map((i) => i.spec?.unschedulable ?? false)).toEqual(labelled.map(() => false));
    const rest = eligible.filter((n) => !labelled.includes(n));
    expectSpread(await fleet!.create(rest.length * 2), rest, await totals());

    // Any other value takes creates, as no label does.
    await kubectl(cluster!, ["label", "node", "--overwrite", ...labelled.slice(0, 5), `${SANDBOXES_LABEL}=true`]);
    await kubectl(cluster!, ["label", "node", ...labelled.slice(5), `${SANDBOXES_LABEL}-`]);
    await waitForValue("the view to take the 10 Nodes back", async () => {
      const out = (await view()).filter((n) => n.state === "cordoned").map((n) => n.name);
      return labelled.every((n) => !out.includes(n)) ? true : undefined;
    }, { timeoutMs: 30_000, everyMs: 250 });
    // Being the emptiest now (they missed the last creates), each of the 10 takes some.
    const got = await fleet!.create(40);
    for (const n of labelled) expect([...got.keys()]).toContain(n);
    expect([...got.keys()].every((n) => eligible.includes(n))).toBe(true);
  }, 300_000);

  it("with a service account that may list the Leases and Nodes but not watch them, lists them every few seconds and judges the same", async () => {
    // The replicas' role before watches: list only (an older deploy/kubernetes/rbac.yaml).
    const rbac = join(work, "list-only.yaml");
    writeFileSync(rbac, [
      "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: list-only, namespace: locale2b}",
      "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: list-only}\nrules: [{apiGroups: [''], resources: [nodes], verbs: [list]}]",
      "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: list-only}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: list-only}\nsubjects: [{kind: ServiceAccount, name: list-only, namespace: locale2b}]",
      "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: list-only, namespace: locale2b}\nrules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [list]}]",
      "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: list-only, namespace: locale2b}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: list-only}\nsubjects: [{kind: ServiceAccount, name: list-only, namespace: locale2b}]",
    ].join("\n---\n"));
    await kubectl(cluster!, ["apply", "-f", rbac]);
    const mark = logged.length;
    const lister = new KubernetesNodes({ cluster: await credentials("list-only"), log: pino({ level: "info" }, { write: (line: string) => void logged.push(JSON.parse(line) as { level: number; msg: string }) }), everyMs: 1_000 });
    await lister.start();
    try {
      await waitForValue("the list-only view to list the Nodes and Leases again", () => {
        const s = lister.watchStats();
        return s.nodes.lists >= 3 && s.leases.lists >= 3 ? true : undefined;
      }, { timeoutMs: 60_000, everyMs: 250 });
      const said = logged.slice(mark).map((l) => l.msg);
      expect(said.filter((m) => /may not watch the cluster's Nodes/.test(m))).toHaveLength(1);
      expect(said.filter((m) => /may not watch the fleet's Leases/.test(m))).toHaveLength(1);
      await waitForValue("the list-only view to be current", () => (lister.current() ? true : undefined), { timeoutMs: 30_000, everyMs: 250 });
      // Judged as the watching replica judges: the same nodes live, the same out of placement.
      const records = await store!.listNodes();
      const judge = (v: typeof records) => {
        const now = Date.now();
        return v.map((n) => `${n.name} ${n.state} ${now - n.heartbeatAt <= NODE_LOST_MS ? "live" : "lost"}`);
      };
      expect(judge(lister.view(records))).toEqual(judge(nodes!.view(records)));
      expect(judge(lister.view(records)).filter((l) => l.endsWith(" lost"))).toHaveLength(10);
    } finally {
      await lister.stop();
    }
  }, 120_000);
});
