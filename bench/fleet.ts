import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { Sandbox } from "e2b";
import { PgStore } from "../control-plane/store/pg-store.js";
import { postgresMissing, startPostgres, type TestPostgres } from "../test/helpers/postgres.js";
import { startControlPlaneChild, type ControlPlaneChild } from "./lib/control-plane.js";
import { processCpuSeconds } from "./lib/cpu.js";
import { NO_CAPS, NODE_TOKEN_HEADER, onPostgresCleanup, ownImagesDir, startFleetChild, waitForWarmPools, type FleetChild } from "./lib/fleet.js";
import { burstOf, burstRounds, eachInParallel, fmtRate, placedText } from "./lib/fleet-bursts.js";
import type { GoalResult } from "./lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable, verdict } from "./lib/report.js";
import { median, quantile } from "./lib/stats.js";
import { benchImagesDir } from "./templates/server.js";

/**
 * `npm run bench -- fleet`: a fleet (`locale2b api` + `locale2b node` over one
 * Postgres, process runtime) against a plain `locale2b serve`, started side by
 * side in one run on this machine, driven with the E2B JS SDK:
 *   1. create -> first stdout of commands.run('echo hi'), fleet vs serve
 *   2. commands.run('true') round trip on a running sandbox, fleet vs serve
 *   3. creates per second, two nodes vs one behind the same API replica; then
 *      with each node pinned to a core of its own (taskset), the nearest this
 *      machine comes to nodes on separate hosts
 *   4. CPU per exec of the API replica and the node (and Postgres) vs serve
 * Both sides run with their default warm pool (the process runtime's: 2 each).
 * Everything it starts (processes, sandboxes, Postgres, temporary folders) is
 * removed at the end, also on an error or Ctrl-C.
 */

const GOAL_CREATE_RATIO = 1.3;
const GOAL_EXEC_RATIO = 1.2;
const GOAL_SCALE_RATIO = 1.8;
/** The API replica's node list is at most this old (control-plane/fleet/api-server.ts NODES_TTL_MS is 2 s). */
const NODES_SETTLE_MS = 2500;
/** Sandboxes made here die on their own after this, should every clean-up fail. */
const SANDBOX_TIMEOUT_MS = 15 * 60_000;

interface Conn {
  apiKey: string;
  apiUrl: string;
  sandboxUrl: string;
}

const p90 = (v: readonly number[]) => quantile(v, 0.9);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every process of the Postgres server (the postmaster and its children), by its data dir's postmaster.pid. */
function postgresPids(url: string): number[] {
  const dir = decodeURIComponent(/^postgresql:\/\/[^@]*@([^/]+)\//.exec(url)?.[1] ?? "");
  try {
    const pm = Number(readFileSync(`${dir}/data/postmaster.pid`, "utf8").split("\n")[0]);
    const kids = readFileSync(`/proc/${pm}/task/${pm}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
    return [pm, ...kids];
  } catch {
    return [];
  }
}

/** CPU seconds of each of `pids` (a process that is gone is left out). */
function cpuByPid(pids: readonly number[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const p of pids) {
    try {
      m.set(p, processCpuSeconds(p));
    } catch {
      // gone
    }
  }
  return m;
}

/** CPU seconds `pids` used since `before` (cpuByPid), over the processes there both times (Postgres's come and go). */
function cpuSince(before: Map<number, number>, pids: readonly number[]): number {
  let s = 0;
  for (const [p, c] of cpuByPid(pids)) {
    const b = before.get(p);
    if (b !== undefined) s += c - b;
  }
  return s;
}

export async function benchFleet(): Promise<GoalResult[]> {
  const missing = postgresMissing() ?? (process.getuid?.() !== 0 ? "the process runtime's sandboxes need root" : undefined);
  if (missing) {
    heading("fleet: skipped");
    console.log(`fleet: skipped: ${missing}`);
    return [{ benchmark: "fleet", metric: "fleet vs serve", value: "skipped", goal: "-", ok: true, notApplicable: "skipped" }];
  }
  const createN = envInt("LOCALE2B_BENCH_FLEET_CREATE_N", 30);
  const execN = envInt("LOCALE2B_BENCH_EXEC_N", 200);
  const warmup = envInt("LOCALE2B_BENCH_WARMUP", 20);
  const burstN = envInt("LOCALE2B_BENCH_FLEET_BURST", 20);
  const burstC = envInt("LOCALE2B_BENCH_FLEET_BURST_CONCURRENCY", 8);
  const rounds = envInt("LOCALE2B_BENCH_FLEET_ROUNDS", 5);
  const cores = os.cpus().length;
  const loadAtStart = os.loadavg()[0]!;

  heading("fleet: `locale2b api` + `locale2b node` over one Postgres vs `locale2b serve` (process runtime, E2B JS SDK)");
  console.log(
    `note: everything runs on this one machine (${cores} cores, shared and busy: load average ${loadAtStart.toFixed(2)} at start): ` +
      "the API replica, the node(s), Postgres, serve, their sandboxes and this client share the same CPUs.\n" +
      "Both sides keep their default warm pool (process runtime: --warm-pool 2, on serve and on each node); " +
      "no --max-sandboxes/--memory-budget-mb caps on either.",
  );

  const images = process.env.LOCALE2B_IMAGES_DIR || benchImagesDir();
  const token = randomBytes(32).toString("hex");
  const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
  const commonEnv = { LOCALE2B_IMAGES_DIR: images, LOCALE2B_NO_IMAGE_BUILD: "1" };

  let pg: TestPostgres | undefined;
  let forgetPg: (() => void) | undefined;
  let store: PgStore | undefined;
  let api: FleetChild | undefined;
  const nodes: FleetChild[] = [];
  let serve: ControlPlaneChild | undefined;
  let servePg: ControlPlaneChild | undefined;
  let n2Images: string | undefined;
  /** The pinned nodes' own image caches. */
  const pinnedImages: string[] = [];
  /** Sandboxes made and not yet killed, with where to kill them. */
  const live = new Map<string, Conn>();

  try {
    pg = await startPostgres();
    const db = await pg.database("locale2b_bench_fleet");
    forgetPg = onPostgresCleanup(db);
    const fleetEnv = { ...commonEnv, LOCALE2B_DATABASE_URL: db, LOCALE2B_NODE_TOKEN: token };

    api = await startFleetChild(
      "api",
      ["api", "--port", "0", "--host", "127.0.0.1"],
      { ...fleetEnv, LOCALE2B_API_KEY: apiKey },
      /E2B_API_URL=(\S+)\n[^]*E2B_API_KEY=[^\n]*\n/,
    );
    const domain = `localhost:${new URL(api.url).port}`;
    const startNode = async (name: string, extraEnv: Record<string, string> = {}, cpus?: string) => {
      const dir = mkdtempSync(`${os.tmpdir()}/locale2b-bench-fleet-${name}-`);
      const n = await startFleetChild(
        `node ${name}`,
        ["node", "--port", "0", "--host", "127.0.0.1", "--data-dir", dir, "--node-name", name, "--domain", domain, ...NO_CAPS],
        { ...fleetEnv, ...extraEnv },
        /reach it at (http:\/\/\S+);/,
        dir,
        undefined,
        cpus,
      );
      nodes.push(n);
      return n;
    };
    const n1 = await startNode("n1");
    serve = await startControlPlaneChild({ env: commonEnv });
    // serve keeps its state in SQLite (synchronous = FULL: an fsync per write) and the fleet in this Postgres (fsync=off, as the
    // tests' helper starts it): the same serve over a database of that Postgres tells the hop's cost from the store's (information).
    servePg = await startControlPlaneChild({ env: commonEnv, extraArgs: ["--database-url", await pg.database("locale2b_bench_serve")] });
    store = await PgStore.open(db, { max: 2 });

    const fleet: Conn = { apiKey, apiUrl: api.url, sandboxUrl: api.url };
    const plain: Conn = { apiKey: serve.apiKey, apiUrl: serve.url, sandboxUrl: serve.url };
    const plainPg: Conn = { apiKey: servePg.apiKey, apiUrl: servePg.url, sandboxUrl: servePg.url };
    const nodeHeaders = { "x-api-key": apiKey, [NODE_TOKEN_HEADER]: token };
    const serveHeaders = { "X-API-Key": serve.apiKey };
    /** Waits (at most 20 s) until every given warm pool holds `ready` sandboxes. */
    const waitWarm = async (pools: { url: string; headers: Record<string, string> }[], ready = 2) => void (await waitForWarmPools(pools, ready, 20_000));
    const n1Pool = { url: n1.url, headers: nodeHeaders };
    const servePool = { url: serve.url, headers: serveHeaders };
    const servePgPool = { url: servePg.url, headers: { "X-API-Key": servePg.apiKey } };
    const kill = async (id: string) => {
      const conn = live.get(id);
      if (!conn) return;
      await Sandbox.kill(id, conn);
      live.delete(id);
    };

    // 1. create -> first output
    heading(`fleet 1/4: Sandbox.create('base') -> first stdout byte of commands.run('echo hi') (N=${createN} each after 3 warm-up, interleaved)`);
    const createToFirst = async (conn: Conn) => {
      const t0 = performance.now();
      const sbx = await Sandbox.create("base", { ...conn, timeoutMs: SANDBOX_TIMEOUT_MS });
      live.set(sbx.sandboxId, conn);
      const t1 = performance.now();
      let first: number | undefined;
      const r = await sbx.commands.run("echo hi", {
        onStdout: () => {
          first ??= performance.now();
        },
      });
      if (r.exitCode !== 0 || first === undefined) throw new Error(`sandbox ${sbx.sandboxId}: echo hi gave no stdout or exited ${r.exitCode}`);
      return { id: sbx.sandboxId, total: first - t0, create: t1 - t0, firstCmd: first - t1 };
    };
    type CreateSample = Awaited<ReturnType<typeof createToFirst>>;
    const created = { fleet: [] as CreateSample[], serve: [] as CreateSample[], servePg: [] as CreateSample[] };
    const sides = [
      { key: "fleet" as const, conn: fleet, pool: n1Pool },
      { key: "serve" as const, conn: plain, pool: servePool },
      { key: "servePg" as const, conn: plainPg, pool: servePgPool },
    ];
    for (let i = 0; i < createN + 3; i++) {
      for (let k = 0; k < sides.length; k++) {
        const side = sides[(i + k) % sides.length]!;
        // A full pool: the create hands over a started sandbox and no refill is running yet.
        await waitWarm([side.pool]);
        const s = await createToFirst(side.conn);
        await kill(s.id);
        if (i >= 3) created[side.key].push(s);
      }
    }
    const totalP50 = (v: CreateSample[]) => median(v.map((s) => s.total));
    const createRow = (name: string, v: CreateSample[]) => [
      name,
      fmtMs(totalP50(v)),
      fmtMs(p90(v.map((s) => s.total))),
      fmtMs(median(v.map((s) => s.create))),
      fmtMs(median(v.map((s) => s.firstCmd))),
      v === created.serve ? "-" : fmtRatio(totalP50(v) / totalP50(created.serve)),
      v === created.servePg ? "-" : fmtRatio(totalP50(v) / totalP50(created.servePg)),
    ];
    printTable(
      ["variant (warm pool full before each create)", "total p50", "total p90", "create call p50", "first output p50", "/ serve", "/ serve on Postgres"],
      [
        createRow("locale2b serve (SQLite store: the baseline)", created.serve),
        createRow("locale2b serve --database-url (the fleet's Postgres, information)", created.servePg),
        createRow("fleet: SDK -> API replica -> node (1 node)", created.fleet),
      ],
    );
    const createRatio = median(created.fleet.map((s) => s.total)) / median(created.serve.map((s) => s.total));
    console.log(
      `fleet / serve, create -> first output p50: ${fmtRatio(createRatio)} (goal <= ${GOAL_CREATE_RATIO}x: ${verdict(createRatio <= GOAL_CREATE_RATIO)}); ` +
        `fleet / serve on the same Postgres: ${fmtRatio(totalP50(created.fleet) / totalP50(created.servePg))} (the hop, with the same store).\n` +
        "total = Sandbox.create called -> first onStdout of commands.run('echo hi'); create call = until Sandbox.create resolved; first output = the rest.",
    );

    // 2 + 4. exec round trip, and the CPU each process spends on it
    heading(`fleet 2/4 and 4/4: commands.run('true') on a running sandbox (N=${execN} each after ${warmup} warm-up, interleaved) and CPU per exec`);
    const fleetSbx = await Sandbox.create("base", { ...fleet, timeoutMs: SANDBOX_TIMEOUT_MS });
    live.set(fleetSbx.sandboxId, fleet);
    const serveSbx = await Sandbox.create("base", { ...plain, timeoutMs: SANDBOX_TIMEOUT_MS });
    live.set(serveSbx.sandboxId, plain);
    const procs = {
      api: () => [api!.pid],
      node: () => [n1.pid],
      pg: () => postgresPids(db),
      serve: () => [serve!.pid],
    };
    // What each process spends idle (heartbeats, timers, the warm pools' sandboxes' bookkeeping), for scale.
    const idleMs = 5000;
    const idle0 = Object.fromEntries(Object.entries(procs).map(([k, p]) => [k, cpuByPid(p())]));
    await sleep(idleMs);
    const idleRate = Object.fromEntries(Object.entries(procs).map(([k, p]) => [k, (cpuSince(idle0[k]!, p()) * 1000) / (idleMs / 1000)]));
    const execVariants = [
      { key: "serve", sbx: serveSbx, pids: { serve: procs.serve }, times: [] as number[], cpu: { serve: 0 } as Record<string, number> },
      { key: "fleet", sbx: fleetSbx, pids: { api: procs.api, node: procs.node, pg: procs.pg }, times: [] as number[], cpu: { api: 0, node: 0, pg: 0 } as Record<string, number> },
    ];
    const runTrue = async (sbx: Sandbox) => {
      const r = await sbx.commands.run("true");
      if (r.exitCode !== 0) throw new Error(`commands.run('true') exited ${r.exitCode}`);
    };
    for (let i = 0; i < warmup; i++) for (const v of execVariants) await runTrue(v.sbx);
    globalThis.gc?.();
    for (let i = 0; i < execN; i++) {
      for (let k = 0; k < execVariants.length; k++) {
        const v = execVariants[(i + k) % execVariants.length]!;
        const pids = Object.entries(v.pids).map(([name, p]) => [name, p()] as const);
        const before = pids.map(([, p]) => cpuByPid(p));
        const t0 = performance.now();
        await runTrue(v.sbx);
        v.times.push(performance.now() - t0);
        pids.forEach(([name, p], j) => (v.cpu[name]! += cpuSince(before[j]!, p)));
      }
    }
    const [serveV, fleetV] = execVariants as [(typeof execVariants)[0], (typeof execVariants)[1]];
    printTable(
      ["variant", "median", "p90", "/ serve"],
      [
        ["locale2b serve", fmtMs(median(serveV.times)), fmtMs(p90(serveV.times)), "-"],
        ["fleet: SDK -> API replica -> node", fmtMs(median(fleetV.times)), fmtMs(p90(fleetV.times)), fmtRatio(median(fleetV.times) / median(serveV.times))],
      ],
    );
    const execRatio = median(fleetV.times) / median(serveV.times);
    console.log(`fleet / serve, commands.run('true') p50: ${fmtRatio(execRatio)} (goal <= ${GOAL_EXEC_RATIO}x: ${verdict(execRatio <= GOAL_EXEC_RATIO)}), +${fmtMs(median(fleetV.times) - median(serveV.times))} per call.`);
    console.log("");
    const perExec = (s: number) => (s / execN) * 1000;
    const fleetCpu = perExec(fleetV.cpu.api! + fleetV.cpu.node!);
    const serveCpu = perExec(serveV.cpu.serve!);
    printTable(
      ["process (user+system CPU while its side's calls ran)", "CPU per exec", "/ serve", "idle CPU"],
      [
        ["locale2b serve", fmtMs(serveCpu), "-", `${idleRate.serve!.toFixed(1)} ms/s`],
        ["fleet: API replica", fmtMs(perExec(fleetV.cpu.api!)), fmtRatio(perExec(fleetV.cpu.api!) / serveCpu), `${idleRate.api!.toFixed(1)} ms/s`],
        ["fleet: node", fmtMs(perExec(fleetV.cpu.node!)), fmtRatio(perExec(fleetV.cpu.node!) / serveCpu), `${idleRate.node!.toFixed(1)} ms/s`],
        ["fleet: API replica + node", fmtMs(fleetCpu), fmtRatio(fleetCpu / serveCpu), "-"],
        [`fleet: Postgres (all its processes, information)`, fmtMs(perExec(fleetV.cpu.pg!)), "-", `${idleRate.pg!.toFixed(1)} ms/s`],
      ],
    );
    console.log(
      "CPU per exec: /proc/<pid>/stat utime+stime read before and after each call of that side, summed over its calls, / N\n" +
        "(10 ms ticks: a sum over many calls, not a per-call value). idle CPU: the same processes over 5 s with nothing asked of them.\n" +
        "The sandbox's envd and bash are not counted (the same on both sides).",
    );
    await kill(fleetSbx.sandboxId);
    await kill(serveSbx.sandboxId);

    // 3. creates per second, one node vs two behind the same API replica
    heading(
      `fleet 3/4: creates per second, ${burstN} Sandbox.create('base') with ${burstC} in flight, two nodes vs one behind the same API replica (${rounds} rounds, order alternating)`,
    );
    n2Images = ownImagesDir(images);
    const n2 = await startNode("n2", { LOCALE2B_IMAGES_DIR: n2Images });
    const n2Pool = { url: n2.url, headers: nodeHeaders };
    const burst = (conn: Conn) =>
      burstOf(burstN, burstC, async () => {
        const s = await Sandbox.create("base", { ...conn, timeoutMs: SANDBOX_TIMEOUT_MS });
        live.set(s.sandboxId, conn);
        return s.sandboxId;
      });
    const clear = (ids: string[]) => eachInParallel(ids, burstC, kill);
    const nodeOf = async (id: string) => (await store!.getSandbox(id))?.node ?? "?";
    const fleetVariant = (c: string) => c === "one" || c === "two";
    const { rates, placed } = await burstRounds({
      variants: ["one", "two", "serve", "servePg"] as const,
      rounds,
      async prepare(variant) {
        if (fleetVariant(variant)) {
          await store!.setNodeState("n2", variant === "one" ? "cordoned" : "ready");
          await sleep(NODES_SETTLE_MS);
        }
        // Every pool full (n2's too when cordoned: it keeps its pool), no refill running, before each burst.
        await waitWarm([n1Pool, n2Pool, servePool, servePgPool]);
      },
      burst: (variant) => burst(variant === "serve" ? plain : variant === "servePg" ? plainPg : fleet),
      nodeOf: async (variant, id) => (fleetVariant(variant) ? nodeOf(id) : undefined),
      clear,
    });
    await store.setNodeState("n2", "ready");
    const scaleRatio = median(rates.two) / median(rates.one);
    printTable(
      ["variant", "creates/s per round", "median", "/ one node", "placed"],
      [
        ["fleet, one node (n2 cordoned)", rates.one.map(fmtRate).join(" "), fmtRate(median(rates.one)), "-", placedText(placed.one)],
        ["fleet, two nodes", rates.two.map(fmtRate).join(" "), fmtRate(median(rates.two)), fmtRatio(scaleRatio), placedText(placed.two)],
        ["locale2b serve (information)", rates.serve.map(fmtRate).join(" "), fmtRate(median(rates.serve)), fmtRatio(median(rates.serve) / median(rates.one)), "-"],
        ["locale2b serve --database-url (information)", rates.servePg.map(fmtRate).join(" "), fmtRate(median(rates.servePg)), fmtRatio(median(rates.servePg) / median(rates.one)), "-"],
      ],
    );
    console.log(
      `two nodes / one node: ${fmtRatio(scaleRatio)} (goal >= ${GOAL_SCALE_RATIO}x on separate hosts). NOT a scaling measurement here: both nodes run on\n` +
        `this one ${cores}-core machine and share its CPUs (each node starts up to one sandbox per CPU at once, so two nodes start\n` +
        "twice as many at once on the same cores). What it does show: placement spreads a burst over both nodes (placed), and what\n" +
        "the API replica's extra hop costs a burst against serve.\n" +
        "creates/s = burst size / time from the first Sandbox.create call to the last one resolved (sandboxes killed after, not timed);\n" +
        "each burst starts with every warm pool full (2 ready sandboxes per node and on each serve), so its first creates are hand-overs.",
    );

    // 3b. the same with each node pinned to a core of its own: two 1-core "hosts" vs one.
    let pinnedRatio: number | undefined;
    if (cores >= 2) {
      heading(`fleet 3/4, pinned: the same bursts with each node pinned to a core of its own (taskset), two nodes vs one (${rounds} rounds, order alternating)`);
      await store.setNodeState("n1", "cordoned");
      await store.setNodeState("n2", "cordoned");
      pinnedImages.push(ownImagesDir(images), ownImagesDir(images));
      const p1 = await startNode("p1", { LOCALE2B_IMAGES_DIR: pinnedImages[0]! }, "0");
      const p2 = await startNode("p2", { LOCALE2B_IMAGES_DIR: pinnedImages[1]! }, "1");
      const pinnedPools = [p1, p2].map((n) => ({ url: n.url, headers: nodeHeaders }));
      const pinned = await burstRounds({
        variants: ["one", "two"] as const,
        rounds,
        async prepare(variant) {
          await store!.setNodeState("p2", variant === "one" ? "cordoned" : "ready");
          await sleep(NODES_SETTLE_MS);
          await waitWarm(pinnedPools);
        },
        burst: () => burst(fleet),
        nodeOf: (_, id) => nodeOf(id),
        clear,
      });
      pinnedRatio = median(pinned.rates.two) / median(pinned.rates.one);
      printTable(
        ["variant", "creates/s per round", "median", "/ one node", "placed"],
        [
          ["fleet, one node on core 0 (p2 cordoned)", pinned.rates.one.map(fmtRate).join(" "), fmtRate(median(pinned.rates.one)), "-", placedText(pinned.placed.one)],
          ["fleet, two nodes on cores 0 and 1", pinned.rates.two.map(fmtRate).join(" "), fmtRate(median(pinned.rates.two)), fmtRatio(pinnedRatio), placedText(pinned.placed.two)],
        ],
      );
      console.log(
        `two pinned nodes / one: ${fmtRatio(pinnedRatio)} (goal >= ${GOAL_SCALE_RATIO}x on separate hosts). Each node, its sandboxes and their envd run on a\n` +
          "core of their own (taskset: a 1-core host each, one start at a time), as two hosts would; the API replica, Postgres and this\n" +
          "client are not pinned and share both cores with them, which a separate-host fleet would not.",
      );
      await store.setNodeState("n1", "ready");
      await store.setNodeState("n2", "ready");
    }
    console.log(`load average at the end: ${os.loadavg()[0]!.toFixed(2)} (${cores} cores)`);

    return [
      { benchmark: "fleet", metric: "create -> first output p50, fleet vs serve", value: fmtRatio(createRatio), goal: `<= ${GOAL_CREATE_RATIO}x`, ok: createRatio <= GOAL_CREATE_RATIO },
      { benchmark: "fleet", metric: "commands.run('true') p50, fleet vs serve", value: fmtRatio(execRatio), goal: `<= ${GOAL_EXEC_RATIO}x`, ok: execRatio <= GOAL_EXEC_RATIO },
      {
        benchmark: "fleet",
        metric: "creates/s, two nodes vs one",
        value: fmtRatio(scaleRatio),
        goal: `>= ${GOAL_SCALE_RATIO}x`,
        ok: scaleRatio >= GOAL_SCALE_RATIO,
        notApplicable: `separate-host goal: both nodes share ${cores} cores here`,
      },
      ...(pinnedRatio === undefined
        ? []
        : [
            {
              benchmark: "fleet",
              metric: "creates/s, two nodes vs one, each node pinned to a core",
              value: fmtRatio(pinnedRatio),
              goal: `>= ${GOAL_SCALE_RATIO}x`,
              ok: pinnedRatio >= GOAL_SCALE_RATIO,
            },
          ]),
    ];
  } finally {
    // Sandboxes first (through the API that made them), then the processes (each kills what is left of its sandboxes), then Postgres.
    await Promise.all(
      [...live].map(([id, conn]) =>
        Sandbox.kill(id, conn).catch(() => undefined),
      ),
    );
    for (const n of nodes.reverse()) await n.stop().catch((err: unknown) => console.log(`  warning: stopping ${n.name}: ${String(err)}`));
    await api?.stop().catch(() => undefined);
    await serve?.stop().catch((err: unknown) => console.log(`  warning: stopping serve: ${String(err)}`));
    await servePg?.stop().catch((err: unknown) => console.log(`  warning: stopping serve --database-url: ${String(err)}`));
    await store?.close().catch(() => undefined);
    await pg?.stop().catch((err: unknown) => console.log(`  warning: stopping Postgres: ${String(err)}`));
    forgetPg?.();
    if (n2Images) rmSync(n2Images, { recursive: true, force: true });
    for (const dir of pinnedImages) rmSync(dir, { recursive: true, force: true });
  }
}
