// The fleet deployed on a test cluster (test/helpers/k8s/cluster.ts) from deploy/kubernetes, through a test
// overlay applied with kubectl (`apply -k`): a Postgres on the host listening on the cluster's bridge
// address with a password (pods reach it over TCP), the locale2b image built from deploy/Dockerfile
// (scripts/k8s/build-image.sh: buildah, no registry) and imported into every node, the Secret, a NodePort on the API's Service (the host reaches NodePorts and pod IPs, not
// ClusterIPs), per-node data dirs and image caches under the cluster's state dir, and the node agents'
// cgroups under their node's kubelet cgroupRoot (so that a lost node loses its sandboxes, as a power loss
// would). Used by test/k8s/fleet.test.ts and `scripts/k8s/cluster.sh fleet` (E2B's own suites, by hand).
import { randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppsV1Api, KubeConfig } from "@kubernetes/client-node";
import { CLI, runCli } from "../cli.js";
import { startPostgres, type TestPostgres } from "../postgres.js";
import { REPO } from "./binaries.js";
import { importImage, kubectl, type Cluster } from "./cluster.js";
import { waitForValue } from "../wait.js";
import { run } from "./host.js";

export const FLEET_NS = "locale2b";
export const FLEET_IMAGE = "locale2b.local/locale2b:test";
export const FLEET_NODE_PORT = 30300;

export interface K8sFleet {
  /** The API's Service from the host: its NodePort on node1's address. */
  service: string;
  /** The sandboxes' `domain` (`--domain` of every pod): getHost(port) is `<port>-<id>.<domain>`. */
  domain: string;
  /** The fleet's API key (made with `locale2b keys create` in its Postgres). */
  apiKey: string;
  /** The fleet's Postgres, over the host's Unix socket (for the `locale2b` CLI and PgStore). */
  databaseUrl: string;
  /** The node token of the fleet (LOCALE2B_NODE_TOKEN). */
  nodeToken: string;
  postgres: TestPostgres;
  timings: Record<string, number>;
  /** Removes the fleet's own files (the overlay, the image tar); the cluster and Postgres are the caller's. */
  cleanup(): void;
}

/** Why a fleet cannot be deployed here (beyond the cluster's own needs), or undefined. */
export function fleetMissing(): string | undefined {
  if (!existsSync(CLI)) return `${CLI} is missing: run 'npm run build'`;
  try {
    execFileSync("buildah", ["--version"], { stdio: "ignore" });
  } catch {
    return "buildah is missing (it builds deploy/Dockerfile's image): run scripts/k8s/setup-host.sh as root";
  }
  if (!existsSync(join(process.env.LOCALE2B_IMAGES_DIR ?? "", "templates", "base.current")))
    return `no built base template in LOCALE2B_IMAGES_DIR (${process.env.LOCALE2B_IMAGES_DIR}): run the suite once (or 'locale2b serve' as root) to build it`;
  return undefined;
}

/**
 * An image cache at `dir` as a host of its own has: the built-in `base` and envd's runtime hard-linked
 * from the shared test cache (built images are never changed in place), without any tree a runtime
 * changes (id-shifted copies, holders); as test/control-plane/fleet.test.ts does. Never the shared
 * cache itself: a node's orphan sweep would remove the templates its store does not know.
 */
function ownImagesDir(dir: string): void {
  const shared = process.env.LOCALE2B_IMAGES_DIR!;
  const base = readFileSync(join(shared, "templates", "base.current"), "utf8").trim();
  mkdirSync(join(dir, "templates"), { recursive: true });
  for (const sub of ["envd", "init", "runtime", "kernels", "node-hash.json"]) {
    if (existsSync(join(shared, sub))) execFileSync("cp", ["-al", join(shared, sub), join(dir, sub)]);
  }
  execFileSync("cp", ["-al", join(shared, "templates", base), join(dir, "templates", base)]);
  for (const n of readdirSync(join(dir, "templates", base))) if (n.startsWith("rootfs-ids-") || n === ".refs") rmSync(join(dir, "templates", base, n), { recursive: true, force: true });
  writeFileSync(join(dir, "templates", "base.current"), base);
}

/** A free TCP port on `host`. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, host, () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** The test overlay of deploy/kubernetes (see the file's head). */
function overlay(c: Cluster, podDb: string, nodeToken: string, domain: string): string {
  const l = c.layout;
  return `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [base]
images:
  - { name: locale2b, newName: ${FLEET_IMAGE.split(":")[0]}, newTag: "${FLEET_IMAGE.split(":")[1]}" }
secretGenerator:
  - name: locale2b
    namespace: ${FLEET_NS}
    options: { disableNameSuffixHash: true }
    literals:
      - LOCALE2B_DATABASE_URL=${podDb}
      - LOCALE2B_NODE_TOKEN=${nodeToken}
configMapGenerator:
  - name: locale2b-config
    namespace: ${FLEET_NS}
    behavior: merge
    literals:
      - LOCALE2B_DOMAIN=${domain}
      - LOCALE2B_LOG_LEVEL=info
patches:
  - target: { kind: Service, name: locale2b-api }
    patch: |
      - { op: replace, path: /spec/type, value: NodePort }
      - { op: add, path: /spec/ports/0/nodePort, value: ${FLEET_NODE_PORT} }
  - target: { kind: Deployment, name: locale2b-api }
    patch: |
      - { op: add, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never }
      - { op: replace, path: /spec/template/spec/terminationGracePeriodSeconds, value: 2 }
  - target: { kind: DaemonSet, name: locale2b-node }
    patch: |
      - { op: add, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never }
      - { op: replace, path: /spec/template/spec/volumes/0/hostPath/path, value: ${join(l.hostDir, "data")} }
      - { op: add, path: /spec/template/spec/containers/0/volumeMounts/0/subPathExpr, value: "$(NODE_NAME)" }
      - { op: replace, path: /spec/template/spec/volumes/1/hostPath/path, value: ${join(l.hostDir, "images")} }
      - { op: add, path: /spec/template/spec/containers/0/volumeMounts/1/subPathExpr, value: "$(NODE_NAME)" }
      - { op: add, path: /spec/template/spec/containers/0/env/-, value: { name: LOCALE2B_NO_IMAGE_BUILD, value: "1" } }
      - { op: test, path: /spec/template/spec/containers/0/env/3/name, value: LOCALE2B_NODE_CGROUP }
      - { op: replace, path: /spec/template/spec/containers/0/env/3/value, value: "${l.cgroupParent.replace(/^\//, "")}/$(NODE_NAME)/locale2b-node" }
      - { op: add, path: /spec/template/spec/containers/0/args/-, value: "--warm-pool=0" }
`;
}

/**
 * Deploys the fleet on `c` and waits until the API Deployment (2 replicas) and the node DaemonSet (one
 * per node) are Ready. On a failure, what it started is stopped (Postgres) or removed (its files).
 */
export async function deployFleet(c: Cluster): Promise<K8sFleet> {
  const l = c.layout;
  const timings: Record<string, number> = {};
  const work = mkdtempSync(join(tmpdir(), "locale2b-k8s-fleet-"));
  const cleanup = () => rmSync(work, { recursive: true, force: true });
  let postgres: TestPostgres | undefined;
  try {
    let t = Date.now();
    const password = randomBytes(16).toString("hex");
    postgres = await startPostgres({ tcp: { host: l.hostIP, port: await freePort(l.hostIP), password } });
    const databaseUrl = await postgres.database("fleet");
    const created = await runCli(["keys", "create", "--database-url", databaseUrl, "--name", "k8s-test"]);
    if (created.code !== 0) throw new Error(`locale2b keys create failed: ${created.stderr}`);
    timings.postgres = Date.now() - t;

    for (const n of l.nodes) ownImagesDir(join(l.hostDir, "images", n.name));
    t = Date.now();
    // deploy/Dockerfile, as a user builds it (its layers cached outside the clone).
    const tar = join(work, "locale2b.tar");
    await run("bash", [join(REPO, "scripts", "k8s", "build-image.sh"), "--ref", FLEET_IMAGE, "--out", tar], { timeoutMs: 1_200_000 });
    await importImage(c, tar);
    timings.image = Date.now() - t;

    // kustomize refuses an absolute path to a base: a copy of it beside the overlay.
    const node1 = l.nodes.find((n) => n.name === "node1")!.ip;
    const domain = `${node1}:${FLEET_NODE_PORT}`;
    const nodeToken = randomBytes(32).toString("hex");
    cpSync(join(REPO, "deploy", "kubernetes"), join(work, "base"), { recursive: true });
    writeFileSync(join(work, "kustomization.yaml"), overlay(c, postgres.tcpUrl("fleet")!, nodeToken, domain));
    t = Date.now();
    await kubectl(c, ["apply", "-k", work], { timeoutMs: 60_000 });
    const kc = new KubeConfig();
    kc.loadFromFile(c.kubeconfig);
    const apps = kc.makeApiClient(AppsV1Api);
    const replicas = l.nodes.length;
    await waitForValue(`the API Deployment (2 ready) and the node DaemonSet (${replicas} ready)`, async () => {
      const dep = await apps.readNamespacedDeployment({ name: "locale2b-api", namespace: FLEET_NS });
      const ds = await apps.readNamespacedDaemonSet({ name: "locale2b-node", namespace: FLEET_NS });
      return (dep.status?.readyReplicas ?? 0) === 2 && (ds.status?.numberReady ?? 0) === replicas ? true : undefined;
    }, { timeoutMs: 180_000, everyMs: 500 });
    timings.applyToReady = Date.now() - t;
    return { service: `http://${domain}`, domain, apiKey: created.stdout.trim(), databaseUrl, nodeToken, postgres, timings, cleanup };
  } catch (e) {
    await postgres?.stop();
    cleanup();
    throw e;
  }
}
