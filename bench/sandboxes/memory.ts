import { startControlPlaneChild, type ControlPlaneChild, type SandboxHandle } from "../lib/control-plane.js";
import { processCpuSeconds } from "../lib/cpu.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMiB, heading, printTable, verdict } from "../lib/report.js";
import { cgroupMemoryUsage, hasPss, meminfo, procMemory, processTable, rssAnon, sandboxPids, sumMemory } from "../lib/procmem.js";
import { MiB, proxyClient, startTrue } from "../lib/sandboxes.js";
import { msSince } from "../lib/stats.js";

// 3. host memory per idle sandbox, and capacity

const GOAL_MIB_PER_SANDBOX = 40;
const GOAL_CAPACITY = 300;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs `fn` over `items`, `concurrency` at a time, in order of start. */
async function mapLimit<T, R>(items: readonly T[], concurrency: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  return out;
}

interface Footprint {
  count: number;
  /** Summed over every sandbox's processes. */
  pss: number;
  rss: number;
  procs: number;
  cgroupMem: number | undefined;
  via: Set<string>;
}

function footprint(sandboxes: SandboxHandle[]): Footprint {
  const table = processTable();
  let pss = 0;
  let rss = 0;
  let procs = 0;
  let cgroupMem: number | undefined;
  const via = new Set<string>();
  for (const sb of sandboxes) {
    const found = sandboxPids(sb.id, sb.dir, table);
    via.add(found.via);
    const m = sumMemory(found.pids);
    pss += m.pss;
    rss += m.rss;
    procs += m.count;
    const cg = cgroupMemoryUsage(sb.id);
    if (cg !== undefined) cgroupMem = (cgroupMem ?? 0) + cg;
  }
  return { count: sandboxes.length, pss, rss, procs, cgroupMem, via };
}

/** CPU seconds used by the control plane and by every sandbox process over `ms` of idling. */
async function idleCpu(cp: ControlPlaneChild, sandboxes: SandboxHandle[], ms: number): Promise<{ cp: number; sandboxes: number }> {
  const table = processTable();
  const pids = sandboxes.flatMap((sb) => [...sandboxPids(sb.id, sb.dir, table).pids]);
  const cpuOf = (p: number) => {
    try {
      return processCpuSeconds(p);
    } catch {
      return 0;
    }
  };
  const sum = () => pids.reduce((s, p) => s + cpuOf(p), 0);
  const c0 = cpuOf(cp.pid);
  const s0 = sum();
  await sleep(ms);
  return { cp: cpuOf(cp.pid) - c0, sandboxes: sum() - s0 };
}

export async function benchMemory(): Promise<GoalResult[]> {
  const k = envInt("LOCALE2B_BENCH_SANDBOXES", 50);
  const target = Number(process.env.LOCALE2B_BENCH_CAPACITY ?? GOAL_CAPACITY);
  const budgetSeconds = envInt("LOCALE2B_BENCH_CAPACITY_SECONDS", 300);
  heading(`sandboxes 3/4: host memory of ${k} idle sandboxes (${hasPss() ? "PSS from /proc/<pid>/smaps_rollup" : "RSS: no smaps_rollup on this kernel"})`);
  const started = performance.now();
  const mem0 = meminfo();
  const cp = await startControlPlaneChild();
  const results: GoalResult[] = [];
  try {
    // One sandbox made and deleted first, so the server's lazily loaded code is in its baseline.
    await cp.deleteSandbox((await cp.createSandbox()).id);
    await sleep(1000);
    const cp0 = procMemory(cp.pid)!;
    const cpAnon0 = rssAnon(cp.pid) ?? 0;
    const avail0 = meminfo().available;
    const t0 = performance.now();
    const sandboxes = await mapLimit(Array.from({ length: k }), 10, () => cp.createSandbox());
    const createSeconds = msSince(t0) / 1000;
    await sleep(3000); // let start-up garbage be collected and the sandboxes settle
    const fp = footprint(sandboxes);
    const cp1 = procMemory(cp.pid)!;
    const cpAnon1 = rssAnon(cp.pid) ?? 0;
    const avail1 = meminfo().available;
    const cpu = await idleCpu(cp, sandboxes, 5000);
    const detail = await cp.getSandbox(sandboxes[0]!.id);

    const cpGrowthPss = cp1.pss - cp0.pss;
    const cpGrowthAnon = cpAnon1 - cpAnon0;
    // PSS sums to what is resident: the sandboxes' PSS plus the change in the server's PSS is what they added
    // (the server's PSS may even drop, its shared pages of the node binary now being split with every envd).
    const perSandbox = (fp.pss + cpGrowthPss) / k;
    const capacity = Math.floor(mem0.available / perSandbox);
    printTable(
      ["measure", "total", "per sandbox"],
      [
        [`sandbox processes, PSS sum (${fp.procs} processes; found via ${[...fp.via].join("+")})`, fmtMiB(fp.pss), fmtMiB(fp.pss / k)],
        ["sandbox processes, RSS sum (counts shared pages once per process)", fmtMiB(fp.rss), fmtMiB(fp.rss / k)],
        ["control plane PSS change (its shared pages are now split with every envd)", fmtMiB(cpGrowthPss), fmtMiB(cpGrowthPss / k)],
        ["control plane RssAnon growth (its own heap and buffers)", fmtMiB(cpGrowthAnon), fmtMiB(cpGrowthAnon / k)],
        ["sandbox cgroups' memory usage (incl. page cache, kernel memory)", fp.cgroupMem === undefined ? "-" : fmtMiB(fp.cgroupMem), fp.cgroupMem === undefined ? "-" : fmtMiB(fp.cgroupMem / k)],
        ["host MemAvailable drop (shared, noisy machine)", fmtMiB(avail0 - avail1), fmtMiB((avail0 - avail1) / k)],
        ["=> per idle sandbox: (PSS sum + control plane PSS change) / K", "", fmtMiB(perSandbox)],
      ],
    );
    const idlePct = (s: number) => `${((s / 5) * 100).toFixed(1)}% of a core`;
    console.log(
      `created ${k} sandboxes 10 at a time in ${createSeconds.toFixed(1)} s (${(k / createSeconds).toFixed(1)}/s). ` +
        `Idle CPU over 5 s: control plane ${idlePct(cpu.cp)}, all sandboxes together ${idlePct(cpu.sandboxes)}.`,
    );
    const okMem = perSandbox <= GOAL_MIB_PER_SANDBOX * MiB;
    const okCap = capacity >= GOAL_CAPACITY;
    console.log(
      `per idle sandbox: ${fmtMiB(perSandbox)} (goal <= ${GOAL_MIB_PER_SANDBOX} MiB: ${verdict(okMem)}). ` +
        `MemAvailable at the start ${fmtMiB(mem0.available)} of ${fmtMiB(mem0.total)} -> about ${capacity} idle sandboxes fit (goal >= ${GOAL_CAPACITY}: ${verdict(okCap)}).`,
    );
    const { DEFAULT_LIMITS } = await import("../../control-plane/manager/options.js");
    const memoryMB = Number(detail.memoryMB);
    if (memoryMB > 0) {
      const byBudget = Math.floor(DEFAULT_LIMITS.memoryBudgetMB / memoryMB);
      const serverCap = Math.min(DEFAULT_LIMITS.maxSandboxes, byBudget);
      console.log(
        `note: with the server's defaults (--max-sandboxes ${DEFAULT_LIMITS.maxSandboxes}, --memory-budget-mb ${DEFAULT_LIMITS.memoryBudgetMB}, ` +
          `${memoryMB} MiB per sandbox by default) it would refuse sandbox #${serverCap + 1}${serverCap < capacity ? `, below what memory allows (${capacity})` : ""}. This run raises both limits.`,
      );
    }
    results.push(
      { benchmark: "sandboxes", metric: `host memory per idle sandbox (K=${k})`, value: fmtMiB(perSandbox), goal: `<= ${GOAL_MIB_PER_SANDBOX} MiB`, ok: okMem },
      { benchmark: "sandboxes", metric: "idle sandboxes that fit in MemAvailable (estimate)", value: String(capacity), goal: `>= ${GOAL_CAPACITY}`, ok: okCap },
    );

    // Optionally go to the capacity goal for real, when memory clearly allows it and time is left.
    const spare = meminfo().available;
    const need = (target - k) * perSandbox;
    const floor = Math.max(2 * 1024 * MiB, mem0.available * 0.25);
    if (target > k && spare - need > floor && msSince(started) / 1000 < budgetSeconds / 2) {
      console.log(`\nscaling up to ${target} idle sandboxes for real (needs ~${fmtMiB(need)} more; stops below ${fmtMiB(floor)} MemAvailable or after ${budgetSeconds} s)`);
      const more: SandboxHandle[] = [];
      const t1 = performance.now();
      let stopped = "";
      const batch = 10;
      while (k + more.length < target) {
        if (meminfo().available < floor) {
          stopped = "MemAvailable fell below the floor";
          break;
        }
        if (msSince(started) / 1000 > budgetSeconds) {
          stopped = "time budget used up";
          break;
        }
        const count = Math.min(batch, target - k - more.length);
        more.push(...(await Promise.all(Array.from({ length: count }, () => cp.createSandbox()))));
      }
      const upSeconds = msSince(t1) / 1000;
      const all = [...sandboxes, ...more];
      await sleep(3000);
      // Every one still answers: /bin/true through the proxy.
      let answered = 0;
      const te = performance.now();
      await mapLimit(all, 10, async (sb) => {
        await startTrue(proxyClient(cp, sb)).then(
          () => answered++,
          () => undefined,
        );
      });
      const execSeconds = msSince(te) / 1000;
      const fpAll = footprint(all);
      const cp2 = procMemory(cp.pid)!;
      const cpAnon2 = rssAnon(cp.pid) ?? 0;
      const cpuAll = await idleCpu(cp, all, 5000);
      const perAll = (fpAll.pss + cp2.pss - cp0.pss) / all.length;
      console.log(
        `${all.length} idle sandboxes running (${more.length} more in ${upSeconds.toFixed(1)} s)${stopped ? `; stopped early: ${stopped}` : ""}. ` +
          `${answered}/${all.length} answered Start /bin/true through the proxy (all in ${execSeconds.toFixed(1)} s, 10 at a time).\n` +
          `per sandbox at ${all.length}: ${fmtMiB(perAll)} (PSS ${fmtMiB(fpAll.pss / all.length)}, control plane PSS change ${fmtMiB((cp2.pss - cp0.pss) / all.length)}); ` +
          `control plane RSS ${fmtMiB(cp2.rss)}, RssAnon +${fmtMiB(cpAnon2 - cpAnon0)} (${fmtMiB((cpAnon2 - cpAnon0) / all.length)} per sandbox); MemAvailable now ${fmtMiB(meminfo().available)}. ` +
          `Idle CPU over 5 s: control plane ${idlePct(cpuAll.cp)}, sandboxes ${idlePct(cpuAll.sandboxes)}.`,
      );
      results.push({
        benchmark: "sandboxes",
        metric: "idle sandboxes actually run and answering",
        value: `${answered} of ${all.length}`,
        goal: `>= ${GOAL_CAPACITY}`,
        ok: answered >= GOAL_CAPACITY,
      });
    } else if (target > k) {
      console.log(`(not scaling up to ${target} for real: not enough spare memory or time; LOCALE2B_BENCH_CAPACITY=0 skips this)`);
    }
    const td = performance.now();
    const total = cp.live.size;
    const failed = await cp.deleteAll(16);
    console.log(`deleted ${total - failed} sandboxes in ${(msSince(td) / 1000).toFixed(1)} s (16 at a time)${failed ? `, ${failed} failed` : ""}; benchmark took ${(msSince(started) / 1000).toFixed(0)} s.`);
    return results;
  } finally {
    await cp.stop();
  }
}
