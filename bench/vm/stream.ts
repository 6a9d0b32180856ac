import type { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { selfCpuSeconds } from "../lib/cpu.js";
import { rawPipe, streamHead } from "../lib/head.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtBytes, fmtRate, fmtRatio, heading, printTable } from "../lib/report.js";
import { directClient } from "../lib/sandboxes.js";
import { max, median, mibPerSec, min, msSince } from "../lib/stats.js";
import { cpuSecondsWithChildren, MiB, type RuntimeSide } from "./cp.js";

// 3. stdout throughput over hybrid vsock (VM) vs the process runtime's Unix socket

interface Variant {
  name: string;
  pids: number[];
  run: (bytes: number) => Promise<number>;
  rates: number[];
  sandboxCpu: number[];
  selfCpu: number[];
}

export async function benchVmStream(pair: { vm: RuntimeSide; proc: RuntimeSide }): Promise<GoalResult[]> {
  const bytes = envInt("LOCALE2B_BENCH_VM_BYTES", 64 * MiB);
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  heading(
    `vm 3/5: stdout throughput of ${fmtBytes(bytes)} (head -c ${bytes} /dev/zero) straight to envd, Connect binary, ${reps} repetitions, median`,
  );
  const agents: HybridVsockAgent[] = [];
  try {
    const variant = (name: string, pids: number[], run: Variant["run"]): Variant => ({ name, pids, run, rates: [], sandboxCpu: [], selfCpu: [] });
    const direct = (side: RuntimeSide) => {
      const d = directClient(side.sb, true);
      agents.push(d.agent);
      return variant(side.label, side.pids, (b) => streamHead(d.client, b));
    };
    const variants = [direct(pair.proc), direct(pair.vm), variant("local pipe (spawn head, read here; information)", [], rawPipe)];
    for (const x of variants) await x.run(Math.min(bytes, 4 * MiB));
    const gib = bytes / 1024 ** 3;
    for (let rep = 0; rep < reps; rep++) {
      for (let k = 0; k < variants.length; k++) {
        const x = variants[(rep + k) % variants.length]!;
        globalThis.gc?.();
        const c0 = cpuSecondsWithChildren(x.pids);
        const s0 = selfCpuSeconds();
        const t0 = performance.now();
        const got = await x.run(bytes);
        const ms = msSince(t0);
        if (got !== bytes) throw new Error(`${x.name}: received ${got} bytes, expected ${bytes}`);
        x.rates.push(mibPerSec(bytes, ms));
        x.sandboxCpu.push((cpuSecondsWithChildren(x.pids) - c0) / gib);
        x.selfCpu.push((selfCpuSeconds() - s0) / gib);
      }
    }
    const [procV, vmV] = variants as [Variant, Variant, Variant];
    const mProc = median(procV.rates);
    printTable(
      ["variant", "median", "min..max", "/ process", "sandbox CPU", "this process CPU"],
      variants.map((x) => [
        x.name,
        fmtRate(median(x.rates)),
        `${min(x.rates).toFixed(0)}..${max(x.rates).toFixed(0)}`,
        fmtRatio(median(x.rates) / mProc),
        x.pids.length ? `${median(x.sandboxCpu).toFixed(2)} s/GiB` : "-",
        `${median(x.selfCpu).toFixed(2)} s/GiB`,
      ]),
    );
    const ratio = median(vmV.rates) / mProc;
    console.log(
      `vm / process: ${fmtRatio(ratio)} (${fmtRate(median(vmV.rates))} vs ${fmtRate(mProc)}). Same direct path as part 2 (HybridVsockAgent on the\n` +
        "sandbox's socket), Connect binary. CPU = user+system seconds per GiB moved: the sandbox's host processes (QEMU +\n" +
        "vhost-device-vsock, whose work includes head and envd inside the guest; the process sandbox's init + envd + head) and this one.",
    );
    return [{ benchmark: "vm", metric: "stream direct, vm vs process runtime (Connect binary)", value: `${fmtRatio(ratio)} (${fmtRate(median(vmV.rates))})`, goal: "(information)", ok: true }];
  } finally {
    for (const a of agents) a.destroy();
  }
}
