import type { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { startControlPlaneChild } from "../lib/control-plane.js";
import { processCpuSeconds } from "../lib/cpu.js";
import { rawPipe, streamHead } from "../lib/head.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtBytes, fmtMiB, fmtRate, fmtRatio, heading, printTable, verdict } from "../lib/report.js";
import { RssSampler, type RssPeak } from "../lib/rss.js";
import { directClient, envdPid, MiB, proxyClient } from "../lib/sandboxes.js";
import { max, median, mibPerSec, min, msSince } from "../lib/stats.js";

// 4. proxied stream throughput

const GOAL_STREAM_RSS_BYTES = 64 * 1024 * 1024;

interface StreamVariant {
  name: string;
  run: (bytes: number) => Promise<number>;
  proxied: boolean;
  sandbox: boolean;
  rates: number[];
  cpRss: RssPeak[];
  envdRss: RssPeak[];
  cpCpu: number[];
  envdCpu: number[];
}

export async function benchStreamProxy(): Promise<GoalResult[]> {
  const bytes = process.env.LOCALE2B_BENCH_BYTES ? envInt("LOCALE2B_BENCH_BYTES", 512 * MiB) : 512 * MiB;
  const reps = envInt("LOCALE2B_BENCH_REPS", 3);
  heading(`sandboxes 4/4: stdout throughput of ${fmtBytes(bytes)} (head -c ${bytes} /dev/zero), Connect binary, ${reps} repetitions, median`);
  const cp = await startControlPlaneChild();
  let direct: HybridVsockAgent | undefined;
  try {
    const sb = await cp.createSandbox();
    const envd = envdPid(sb);
    const viaProxy = proxyClient(cp, sb, true);
    const d = directClient(sb, true);
    direct = d.agent;
    const v = (name: string, run: StreamVariant["run"], proxied: boolean, sandbox: boolean): StreamVariant => ({
      name, run, proxied, sandbox, rates: [], cpRss: [], envdRss: [], cpCpu: [], envdCpu: [],
    });
    const variants = [
      v("local pipe (spawn head, read here)", rawPipe, false, false),
      v("direct to envd (hybrid-vsock socket)", (b) => streamHead(d.client, b), false, true),
      v("through the control plane's proxy", (b) => streamHead(viaProxy, b), true, true),
    ];
    for (const x of variants) await x.run(Math.min(bytes, 16 * MiB));
    const gib = bytes / 1024 ** 3;
    for (let rep = 0; rep < reps; rep++) {
      for (let k = 0; k < variants.length; k++) {
        const x = variants[(rep + k) % variants.length]!;
        globalThis.gc?.();
        const cpS = x.sandbox ? await RssSampler.start(cp.pid) : undefined;
        const envdS = x.sandbox ? await RssSampler.start(envd) : undefined;
        const c0 = processCpuSeconds(cp.pid);
        const e0 = processCpuSeconds(envd);
        const t0 = performance.now();
        let got: number;
        try {
          got = await x.run(bytes);
        } finally {
          const a = await cpS?.stop();
          const b = await envdS?.stop();
          if (a) x.cpRss.push(a);
          if (b) x.envdRss.push(b);
        }
        const ms = msSince(t0);
        if (got !== bytes) throw new Error(`${x.name}: received ${got} bytes, expected ${bytes}`);
        x.rates.push(mibPerSec(bytes, ms));
        if (x.sandbox) {
          x.cpCpu.push((processCpuSeconds(cp.pid) - c0) / gib);
          x.envdCpu.push((processCpuSeconds(envd) - e0) / gib);
        }
      }
    }
    const [pipeV, directV, proxyV] = variants as [StreamVariant, StreamVariant, StreamVariant];
    const mDirect = median(directV.rates);
    const growth = (r: RssPeak[]) => (r.length ? `${fmtMiB(median(r.map((p) => p.growth)))}, ${fmtMiB(max(r.map((p) => p.growth)))}` : "-");
    printTable(
      ["variant", "median", "min..max", "/ direct", "/ local pipe", "control plane CPU", "envd CPU", "control plane RSS growth (median, max)", "envd RSS growth"],
      variants.map((x) => [
        x.name,
        fmtRate(median(x.rates)),
        `${min(x.rates).toFixed(0)}..${max(x.rates).toFixed(0)}`,
        x === pipeV ? "-" : fmtRatio(median(x.rates) / mDirect),
        fmtRatio(median(x.rates) / median(pipeV.rates)),
        x.proxied ? `${median(x.cpCpu).toFixed(2)} s/GiB` : "-",
        x.sandbox ? `${median(x.envdCpu).toFixed(2)} s/GiB` : "-",
        x.sandbox ? growth(x.cpRss) : "-",
        x.sandbox ? growth(x.envdRss) : "-",
      ]),
    );
    const ratio = median(proxyV.rates) / mDirect;
    const cpGrowth = max(proxyV.cpRss.map((p) => p.growth));
    const okRss = cpGrowth <= GOAL_STREAM_RSS_BYTES;
    console.log(
      `proxy / direct: ${fmtRatio(ratio)} (${fmtRate(median(proxyV.rates))} vs ${fmtRate(mDirect)}). ` +
        `Control plane peak RSS growth while proxying: ${fmtMiB(cpGrowth)} (goal <= ${fmtMiB(GOAL_STREAM_RSS_BYTES)}, flat under back-pressure: ${verdict(okRss)}).\n` +
        "RSS growth = peak VmRSS (sampled every 50 ms) minus VmRSS at the start of that run. CPU = user+system seconds per GiB moved.",
    );
    return [
      { benchmark: "sandboxes", metric: "stream via proxy vs direct (Connect binary)", value: `${fmtRatio(ratio)} (${fmtRate(median(proxyV.rates))})`, goal: "(information)", ok: true },
      { benchmark: "sandboxes", metric: "control plane RSS growth while proxying a stream", value: fmtMiB(cpGrowth), goal: `<= ${fmtMiB(GOAL_STREAM_RSS_BYTES)}`, ok: okRss },
    ];
  } finally {
    direct?.destroy();
    await cp.stop();
  }
}
