import { benchControlPlane } from "./sandboxes/index.js";
import { benchDashboard } from "./dashboard.js";
import { benchE2bEnvd } from "./e2b-envd.js";
import { benchEgress } from "./egress.js";
import { benchExec } from "./exec.js";
import { benchFleet } from "./fleet.js";
import { benchPorts } from "./ports.js";
import { benchRuntimes } from "./runtimes.js";
import { benchFiles } from "./files.js";
import type { GoalResult } from "./lib/goal.js";
import { printMachine, printTable, verdict } from "./lib/report.js";
import { benchStream } from "./stream.js";
import { benchTemplates } from "./templates/index.js";
import { benchTls } from "./tls.js";
import { benchVm } from "./vm/index.js";
import { benchVolumes } from "./volumes.js";
import { benchWorkspace } from "./workspace/index.js";

/**
 * `npm run bench [-- exec|stream|files ...]`: runs the named benchmarks (all
 * by default) and prints their tables and a summary of the goals. Benchmarks
 * report, they do not fail: a missed goal is printed as MISSED, and only a
 * benchmark that could not run at all makes the exit code non-zero.
 */
const BENCHMARKS: Record<string, () => Promise<GoalResult[]>> = {
  exec: benchExec,
  stream: benchStream,
  files: benchFiles,
  sandboxes: benchControlPlane,
  vm: benchVm,
  ports: benchPorts,
  workspace: benchWorkspace,
  "e2b-envd": benchE2bEnvd,
  runtimes: benchRuntimes,
  templates: benchTemplates,
  tls: benchTls,
  fleet: benchFleet,
  volumes: benchVolumes,
  dashboard: benchDashboard,
  egress: benchEgress,
};

const USAGE = `usage: npm run bench [-- ${Object.keys(BENCHMARKS).join("|")} ...]
environment:
  LOCALE2B_BENCH_BYTES=1G        bytes per large transfer (stream, files); k/M/G suffixes
  LOCALE2B_BENCH_REPS=3          repetitions of each large transfer (median reported)
  LOCALE2B_BENCH_EXEC_N=200      measured exec round trips per variant
  LOCALE2B_BENCH_WARMUP=20       exec warm-up round trips per variant
  LOCALE2B_BENCH_GZIP=1          add stream variants whose client accepts gzip (connect-node's default)
  LOCALE2B_BENCH_ENVD_NODE_ARGS  extra node flags for envd, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
sandboxes (the control plane, process runtime):
  LOCALE2B_BENCH_CREATE_N=50     sandboxes created for create -> first output (one at a time, then in waves)
  LOCALE2B_BENCH_CREATE_CONCURRENCY=10  sandboxes per wave
  LOCALE2B_BENCH_SANDBOXES=50    idle sandboxes whose memory is measured
  LOCALE2B_BENCH_CAPACITY=300    then go to this many for real if memory clearly allows (0: never)
  LOCALE2B_BENCH_CAPACITY_SECONDS=300  time budget of the memory part
  LOCALE2B_BENCH_SANDBOX_PARTS   only these parts, e.g. "1,3" (1 create, 2 exec, 3 memory, 4 stream, 5 snapshots)
  LOCALE2B_BENCH_SNAPSHOT_MIB=256  MiB a sandbox writes before it is snapshotted (part 5)
  LOCALE2B_BENCH_CP_NODE_ARGS    extra node flags for the server, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
egress (HTTPS from a sandbox through the egress proxy vs direct, process runtime, needs root and nft):
  LOCALE2B_BENCH_EGRESS_N=200    requests per path, each on a new connection
  LOCALE2B_BENCH_EGRESS_ROUNDS=6 interleaved rounds they are split into
ports (a server in a sandbox through getHost(port) vs directly, process runtime):
  LOCALE2B_BENCH_PORT_BYTES=256M bytes per GET (repeated LOCALE2B_BENCH_REPS times)
  LOCALE2B_BENCH_PORT_N=500      small GETs and echo round trips per path
dashboard (the web dashboard in headless Chromium: Debian's chromium or LOCALE2B_CHROMIUM; process runtime):
  LOCALE2B_BENCH_DASHBOARD_SANDBOXES=100  running sandboxes the pages list
  LOCALE2B_BENCH_DASHBOARDS=5    pages watching them while the server's CPU is measured
  LOCALE2B_BENCH_DASHBOARD_SECONDS=30  length of each CPU window
workspace (the workspace API, process runtime):
  LOCALE2B_BENCH_WORKSPACE_PARTS only these parts, e.g. "1,3" (1 exec, 2 session echo, 3 event stream)
  LOCALE2B_BENCH_WS_SANDBOXES=100 sandboxes running commands at once (part 3)
  LOCALE2B_BENCH_WS_COMMANDS=50  commands each of them runs (part 3)
e2b-envd (E2B's Go envd beside ours; needs root, Go and a copy of e2b-dev/infra, else "skipped"):
  LOCALE2B_BENCH_E2B_ROUNDS=3    rounds, each starting both envds fresh (order alternating); also uses BYTES, EXEC_N, WARMUP
  LOCALE2B_BENCH_E2B_SDK_N=50    SDK commands.run('true') calls per round and envd
  LOCALE2B_BENCH_E2B_INFRA       the e2b-dev/infra repository (checkout or bare; default /work/.mirror/e2b-dev+infra/repo)
  LOCALE2B_BENCH_E2B_REF=HEAD    its commit to build (cached in ~/.cache/locale2b/e2b-envd/<commit>/envd)
  LOCALE2B_BENCH_E2B_ENVD        a prebuilt E2B envd binary instead
tls (the control plane with --tls-cert/--tls-key beside clear text, process runtime; openssl):
  uses LOCALE2B_BENCH_EXEC_N, LOCALE2B_BENCH_WARMUP, LOCALE2B_BENCH_BYTES (1G: the download) and LOCALE2B_BENCH_REPS
runtimes (gvisor beside the process runtime; gvisor needs runsc, else it says "skipped"):
  LOCALE2B_BENCH_RUNTIMES_N=8    creates per runtime (5x as many execs)
templates (the Template SDK, start commands, the Code Interpreter; root, the base and code-interpreter-v1 templates built in LOCALE2B_IMAGES_DIR, runsc for gvisor):
  LOCALE2B_BENCH_TEMPLATE_PARTS  only these parts, e.g. "2,4" (1 build, 2 start command, 3 runCode round trip, 4 code-interpreter create)
  LOCALE2B_BENCH_TEMPLATE_BUILDS=1   rounds of part 1 (a plain sandbox, a cold build, a cached build each)
  LOCALE2B_BENCH_TEMPLATE_CREATES=10 creates from the warm pool / checkpoint per runtime (parts 2 and 4)
  LOCALE2B_BENCH_TEMPLATE_COLD=3     cold creates beside them
  LOCALE2B_BENCH_TEMPLATE_GVISOR_POOL=1  part 2 also on gvisor with a warm pool of restored sandboxes (a third build)
  LOCALE2B_BENCH_RUNCODE_N=100   runCode round trips per variant (part 3, after 10 warm-up)
fleet (locale2b api + locale2b node over a throwaway Postgres vs locale2b serve, process runtime; root and Debian's postgresql; a few minutes):
  LOCALE2B_BENCH_FLEET_CREATE_N=30   creates -> first output per side (after 3 warm-up); also uses EXEC_N and WARMUP
  LOCALE2B_BENCH_FLEET_BURST=20      creates per burst (creates per second, one node vs two)
  LOCALE2B_BENCH_FLEET_BURST_CONCURRENCY=8  creates in flight in a burst
  LOCALE2B_BENCH_FLEET_ROUNDS=5      bursts per variant (order alternating)
volumes (a volume mounted in a sandbox vs the sandbox's own disk, process runtime; root):
  LOCALE2B_BENCH_VOLUME_BYTES=256M  bytes per dd write and read (repeated LOCALE2B_BENCH_REPS times, order alternating)
vm (qemu microVMs; needs QEMU, vhost-device-vsock, a kernel and the base template):
  LOCALE2B_BENCH_VM_BOOTS=3      VMs booted one at a time (create -> envd ready; their memory is part 5)
  LOCALE2B_BENCH_VM_EXEC_N=50    measured exec round trips per runtime (after 5 warm-up)
  LOCALE2B_BENCH_VM_BYTES=64M    bytes per stream transfer (repeated LOCALE2B_BENCH_REPS times)
  LOCALE2B_BENCH_VM_COLD=1       also time a cold template build (debootstrap, network; about a minute)
  LOCALE2B_BENCH_VM_PARTS        only these parts, e.g. "1,5" (1 boot, 2 exec, 3 stream, 4 template, 5 memory)
`;

async function main(args: string[]): Promise<number> {
  if (args.includes("-h") || args.includes("--help")) {
    process.stdout.write(USAGE);
    return 0;
  }
  const unknown = args.filter((a) => !(a in BENCHMARKS));
  if (unknown.length) {
    process.stderr.write(`unknown benchmark ${unknown.map((u) => `'${u}'`).join(", ")}\n${USAGE}`);
    return 2;
  }
  const names = args.length ? args : Object.keys(BENCHMARKS);
  printMachine();
  if (!globalThis.gc) console.log("note: run with node --expose-gc (as npm run bench does) to collect garbage between runs");

  const results: GoalResult[] = [];
  const failed: string[] = [];
  for (const name of names) {
    try {
      results.push(...(await BENCHMARKS[name]!()));
    } catch (err) {
      failed.push(name);
      console.log(`\n${name}: FAILED, no numbers: ${err instanceof Error ? err.message : String(err)}`);
      if (process.env.LOCALE2B_BENCH_DEBUG && err instanceof Error) console.log(err.stack);
    }
  }

  console.log("\n== summary ==");
  if (results.length) {
    printTable(
      ["benchmark", "measure", "value", "goal", ""],
      results.map((r) => [r.benchmark, r.metric, r.value, r.goal, r.notApplicable ?? verdict(r.ok)]),
      2,
    );
  }
  for (const name of failed) console.log(`${name}: could not run (see its error above)`);
  return failed.length ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
