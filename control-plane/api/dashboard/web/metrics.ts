import { call, e2b, ws, type Sample } from "./api";

/** The recent CPU and memory of one sandbox, oldest first. */
export interface Series {
  times: number[];
  cpu: number[];
  memMiB: number[];
  memTotalMiB: number;
  /** Disk in use, MiB (the page's charts only). */
  diskMiB?: number[];
}

const KEEP = 60;
/** Sparkline histories loaded at once when many sandboxes are new to the list. */
const HISTORIES_AT_ONCE = 3;

function push(s: Series, t: number, cpu: number, mem: number, memTotal: number): void {
  if (s.times.length && t <= s.times[s.times.length - 1]!) return;
  s.times.push(t);
  s.cpu.push(cpu);
  s.memMiB.push(mem / 1024 / 1024);
  s.memTotalMiB = memTotal / 1024 / 1024;
  if (s.times.length > KEEP) {
    s.times.shift();
    s.cpu.shift();
    s.memMiB.shift();
  }
}

/**
 * Sparklines for the list: a sandbox seen for the first time gets its last
 * five minutes from the metrics history (workspace API), then each refresh
 * adds the latest sample of every running sandbox in one call per hundred
 * (E2B's GET /sandboxes/metrics?sandbox_ids=).
 */
export class SparkMetrics {
  readonly series = new Map<string, Series>();

  async refresh(runningIds: string[]): Promise<void> {
    for (const id of [...this.series.keys()]) if (!runningIds.includes(id)) this.series.delete(id);
    const fresh = runningIds.filter((id) => !this.series.has(id));
    // A few histories at a time: over HTTP/1.1 a browser has 6 connections to the server, and the page's
    // other calls (a click to another page) must not queue behind a hundred of these.
    const load = async () => {
      for (let id = fresh.shift(); id !== undefined; id = fresh.shift()) {
        const s: Series = { times: [], cpu: [], memMiB: [], memTotalMiB: 0 };
        const start = Math.floor(Date.now() / 1000) - 300;
        const r = await call<{ samples: Sample[] }>("GET", ws(`/sandboxes/${id}/metrics?start=${start}`)).catch(() => undefined);
        for (const x of r?.samples ?? []) push(s, Date.parse(x.timestamp) / 1000, x.cpu_percent, x.memory_used_bytes, x.memory_total_bytes);
        this.series.set(id, s);
      }
    };
    await Promise.all(Array.from({ length: Math.min(HISTORIES_AT_ONCE, fresh.length) }, load));
    for (let i = 0; i < runningIds.length; i += 100) {
      const ids = runningIds.slice(i, i + 100);
      const r = await call<{ sandboxes: Record<string, { timestampUnix: number; cpuUsedPct: number; memUsed: number; memTotal: number }> }>(
        "GET",
        e2b(`/sandboxes/metrics?sandbox_ids=${ids.join(",")}`),
      ).catch(() => undefined);
      for (const [id, m] of Object.entries(r?.sandboxes ?? {})) {
        const s = this.series.get(id);
        if (s) push(s, m.timestampUnix, m.cpuUsedPct, m.memUsed, m.memTotal);
      }
    }
  }
}

/** The charts of one sandbox's page: the last `minutes` from the history, then what came since, every interval. */
export async function loadSeries(id: string, s: Series | undefined, minutes: number): Promise<{ series: Series; interval: number }> {
  const series: Series = s
    ? { times: [...s.times], cpu: [...s.cpu], memMiB: [...s.memMiB], memTotalMiB: s.memTotalMiB, diskMiB: [...(s.diskMiB ?? [])] }
    : { times: [], cpu: [], memMiB: [], memTotalMiB: 0, diskMiB: [] };
  const last = series.times.at(-1);
  const start = last !== undefined ? last + 0.001 : Date.now() / 1000 - minutes * 60;
  const r = await call<{ samples: Sample[]; interval_seconds: number }>("GET", ws(`/sandboxes/${id}/metrics?start=${start.toFixed(3)}`));
  for (const x of r.samples) {
    const t = Date.parse(x.timestamp) / 1000;
    if (last !== undefined && t <= last) continue;
    series.times.push(t);
    series.cpu.push(x.cpu_percent);
    series.memMiB.push(x.memory_used_bytes / 1024 / 1024);
    series.diskMiB!.push(x.disk_used_bytes / 1024 / 1024);
    series.memTotalMiB = x.memory_total_bytes / 1024 / 1024;
  }
  const cut = Date.now() / 1000 - minutes * 60;
  while (series.times.length && series.times[0]! < cut) {
    series.times.shift();
    series.cpu.shift();
    series.memMiB.shift();
    series.diskMiB!.shift();
  }
  return { series, interval: r.interval_seconds };
}
