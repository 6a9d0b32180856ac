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
import { spawnSync } from "node:child_process";
import { buildBinaries } from "./binaries.js";
import { clusterStatus, downCluster, importImage, openCluster, startNodeAgain, stopNode, upCluster } from "./cluster.js";
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
    default:
      console.error("usage: scripts/k8s/cluster.sh up|down|status|import TAR|kubectl -- ARGS|stop-node NODE|start-node NODE|build [--name N] [--nodes N] [--apiserver-only] [--state-dir DIR] [--replace] [--keep-state]");
      return 2;
  }
}

main().then(
  (code) => process.exit(code),
  (e: Error) => {
    console.error(`cluster.sh ${command}: ${e.message}`);
    process.exit(1);
  },
);
