// The test cluster from a shell (run through scripts/k8s/cluster.sh):
//   up [--name N] [--nodes 2] [--state-dir DIR] [--replace]   bring it up; print where it is and the timings
//      [--apiserver-only]                                    etcd and kube-apiserver only (with --nodes 0: no nodes)
//   down [--name N | --state-dir DIR] [--keep-state]         take it down; exit 1 if anything is left behind
//   status [--name N | --state-dir DIR]                      nodes, addresses, kubeconfig
//   import TAR [--name N]                                    import an image tar into every node's containerd
//   kubectl [--name N] -- ARGS...                            kubectl of the cluster's version, as admin
//   stop-node NODE [--name N]                                lose a node at once (SIGKILL all it runs)
//   start-node NODE [--name N]                               start a stopped node again, wait until Ready
//   build                                                    build (or find) the binaries; print their cache
//   fleet [--name N]                                         up (replacing N), the fleet deployed on it from deploy/kubernetes
//                                                            (test/helpers/k8s/fleet.ts), the E2B SDK's environment printed;
//                                                            held until SIGINT/SIGTERM, then down, Postgres stopped
import { spawnSync } from "node:child_process";
import { homedir } from "node:os";
import { join } from "node:path";
import { buildBinaries } from "./binaries.js";
import { clusterStatus, downCluster, importImage, openCluster, startNodeAgain, stopNode, upCluster } from "./cluster.js";
import { deployFleet } from "./fleet.js";
import { defaultStateDir } from "./layout.js";

const [command, ...rest] = process.argv.slice(2);
const flags: Record<string, string | true> = {};
const positional: string[] = [];
let passthrough: string[] = [];
for (let i = 0; i < rest.length; i++) {
  const a = rest[i]!;
  if (a === "--") {
    passthrough = rest.slice(i + 1);
    break;
  }
  if (a.startsWith("--")) {
    const key = a.slice(2);
    if (["replace", "keep-state", "apiserver-only"].includes(key)) flags[key] = true;
    else flags[key] = rest[++i] ?? "";
  } else positional.push(a);
}
const name = typeof flags.name === "string" ? flags.name : process.env.LOCALE2B_K8S_CLUSTER || "dev";
const stateDir = typeof flags["state-dir"] === "string" ? flags["state-dir"] : defaultStateDir(name);

async function main(): Promise<number> {
  switch (command) {
    case "up": {
      const c = await upCluster({ name, nodes: Number(flags.nodes ?? 2), stateDir, replace: flags.replace === true, apiserverOnly: flags["apiserver-only"] === true, progress: true });
      console.log(await clusterStatus(c.layout.stateDir));
      console.log(`export KUBECONFIG=${c.kubeconfig}`);
      return 0;
    }
    case "down": {
      const left = await downCluster(stateDir, { keepState: flags["keep-state"] === true });
      if (left.length) {
        console.error(`left behind:\n  ${left.join("\n  ")}`);
        return 1;
      }
      console.log(`cluster ${name} is down; nothing left behind`);
      return 0;
    }
    case "status":
      console.log(await clusterStatus(stateDir));
      return 0;
    case "import": {
      if (!positional[0]) throw new Error("import TAR: which image tar?");
      await importImage(openCluster(stateDir), positional[0]);
      return 0;
    }
    case "kubectl": {
      const c = openCluster(stateDir);
      return spawnSync(c.kubectl, ["--kubeconfig", c.kubeconfig, ...passthrough, ...positional], { stdio: "inherit" }).status ?? 1;
    }
    case "stop-node":
    case "start-node": {
      if (!positional[0]) throw new Error(`${command} NODE: which node?`);
      const c = openCluster(stateDir);
      await (command === "stop-node" ? stopNode(c, positional[0]) : startNodeAgain(c, positional[0]));
      return 0;
    }
    case "build":
      console.log((await buildBinaries({ progress: true })).dir);
      return 0;
    case "fleet":
      return holdFleet();
    default:
      console.error("usage: scripts/k8s/cluster.sh up|down|status|import TAR|kubectl -- ARGS|stop-node NODE|start-node NODE|build|fleet [--name N] [--nodes N] [--apiserver-only] [--state-dir DIR] [--replace] [--keep-state]");
      return 2;
  }
}

/** A fleet on a fresh cluster, for the E2B SDKs (E2B's own suites, by hand) until a signal; then nothing left. */
async function holdFleet(): Promise<number> {
  process.env.LOCALE2B_IMAGES_DIR ||= join(homedir(), ".cache", "locale2b", "images");
  const c = await upCluster({ name, nodes: 2, stateDir, replace: true, progress: true });
  let fleet;
  try {
    fleet = await deployFleet(c);
  } catch (e) {
    await downCluster(c.layout.stateDir);
    throw e;
  }
  console.log(`the fleet is up on cluster ${name} (${JSON.stringify(fleet.timings)}); point the E2B SDKs at its Service:
export E2B_API_URL=${fleet.service} E2B_SANDBOX_URL=${fleet.service} E2B_DOMAIN=${fleet.domain} E2B_API_KEY=${fleet.apiKey}
export LOCALE2B_DATABASE_URL=${fleet.databaseUrl}   # locale2b nodes list
export KUBECONFIG=${c.kubeconfig}
Ctrl-C (or SIGTERM) takes it down.`);
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  const left = await downCluster(c.layout.stateDir);
  await fleet.postgres.stop();
  fleet.cleanup();
  if (left.length) console.error(`left behind:\n  ${left.join("\n  ")}`);
  return left.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (e: Error) => {
    console.error(`cluster.sh ${command}: ${e.message}`);
    process.exit(1);
  },
);
