// kwok (sigs.k8s.io/kwok): a controller that plays the kubelet for Node objects against a real apiserver, so
// that a test can have 100 Nodes without 100 kubelets. Built by scripts/k8s/build-kwok.sh into
// ~/.cache/locale2b/k8s-kwok (outside the clone); run here as a daemon of a test cluster (its command line
// names the cluster's state directory, so `downCluster` stops it with the rest).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Cluster } from "./cluster.js";
import { get } from "./control-plane.js";
import { alive, commandExists, startDaemon, tail } from "./host.js";
import { waitForValue } from "../wait.js";
import { cacheRoot, REPO, runBuildScript } from "./binaries.js";

export const KWOK_SCRIPT = join(REPO, "scripts", "k8s", "build-kwok.sh");
/** The annotation kwok is told to manage Nodes by (the one kwok's own manifests and kwokctl use). */
export const KWOK_ANNOTATION = "kwok.x-k8s.io/node";

export interface KwokArtifacts {
  kwok: string;
  /** The Stages that make a managed Node Ready and renew its kube-node-lease Lease. */
  stages: string;
}

function artifacts(dir: string): KwokArtifacts {
  return { kwok: join(dir, "kwok"), stages: join(dir, "node-stages.yaml") };
}

/** The build script's cache directory for this checkout (the key it computes), if complete. */
export function cachedKwok(): KwokArtifacts | undefined {
  const version = process.env.LOCALE2B_KWOK_VERSION || "v0.8.0";
  const key = createHash("sha256").update(readFileSync(KWOK_SCRIPT)).digest("hex").slice(0, 12);
  const dir = join(cacheRoot(), "k8s-kwok", `${version}-${key}`);
  return existsSync(join(dir, ".complete")) ? artifacts(dir) : undefined;
}

/** Runs the build script (at once when cached; a few minutes cold). Progress on stderr when `progress`. */
export async function buildKwok(opts: { progress?: boolean } = {}): Promise<KwokArtifacts> {
  const bin = await runBuildScript(KWOK_SCRIPT, opts);
  if (!existsSync(bin)) throw new Error(`scripts/k8s/build-kwok.sh named ${bin || "nothing"}, which is not there`);
  return artifacts(join(bin, ".."));
}

/** Why kwok cannot run here (not built, and no Go or LOCALE2B_K8S_NO_BUILD=1), after building it if it can. */
export async function kwokSkipReason(): Promise<string | undefined> {
  if (cachedKwok()) return undefined;
  if (process.env.LOCALE2B_K8S_NO_BUILD === "1") return "kwok is not built and LOCALE2B_K8S_NO_BUILD=1 (run scripts/k8s/build-kwok.sh)";
  if (!commandExists("go")) return "no Go toolchain to build kwok with (scripts/k8s/build-kwok.sh needs Go >= 1.26)";
  try {
    await buildKwok({ progress: true });
  } catch (e) {
    return `kwok could not be built: ${(e as Error).message}`;
  }
  return undefined;
}

export interface Kwok {
  pid: number;
  log: string;
}

/**
 * Starts kwok against the cluster's apiserver as admin, managing the Nodes annotated
 * `kwok.x-k8s.io/node=fake` (fakeNode): it makes them Ready and keeps their kube-node-lease Leases renewed.
 * Its HOME is its own directory (kwok reads ~/.kwok/kwok.yaml when there is one); its server (healthz)
 * listens on the cluster's bridge address only.
 */
export async function startKwok(c: Cluster, a: KwokArtifacts): Promise<Kwok> {
  const l = c.layout;
  const home = join(l.stateDir, "kwok");
  mkdirSync(home, { recursive: true });
  const log = join(l.stateDir, "logs", "kwok.log");
  const server = `${l.hostIP}:10247`;
  const pid = await startDaemon(
    a.kwok,
    [
      `--kubeconfig=${c.kubeconfig}`,
      `--config=${a.stages}`,
      `--manage-nodes-with-annotation-selector=${KWOK_ANNOTATION}=fake`,
      "--node-lease-duration-seconds=40",
      `--server-address=${server}`,
      `--node-ip=${l.hostIP}`,
    ],
    log,
    { ...process.env, HOME: home },
  );
  await waitForValue(`kwok to be healthy (log: ${log})`, async () => {
    if (!alive(pid)) throw new Error(`kwok exited:\n${tail(log)}`);
    return (await get(`http://${server}/healthz`).catch(() => undefined))?.status === 200 ? true : undefined;
  }, { timeoutMs: 60_000, everyMs: 200 });
  return { pid, log };
}

/** A Node object kwok manages (as kwok's own test/kwok/fake-node.yaml, without its taint). */
export function fakeNode(name: string, labels: Record<string, string> = {}): Record<string, unknown> {
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name,
      annotations: { [KWOK_ANNOTATION]: "fake", "node.alpha.kubernetes.io/ttl": "0" },
      labels: { "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", type: "kwok", ...labels },
    },
  };
}

/** Writes a List of objects to a file for `kubectl create -f` (one call for many). */
export function writeList(file: string, items: Record<string, unknown>[]): string {
  writeFileSync(file, JSON.stringify({ apiVersion: "v1", kind: "List", items }));
  return file;
}
