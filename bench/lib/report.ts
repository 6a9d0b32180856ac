import os from "node:os";

/** Prints rows as an aligned table: the first `leftColumns` columns left-aligned, the others right-aligned. */
export function printTable(header: string[], rows: string[][], leftColumns = 1): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i < leftColumns ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ").trimEnd();
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const r of rows) console.log(line(r));
}

export function heading(title: string): void {
  console.log(`\n== ${title} ==`);
}

export const fmtMs = (ms: number): string => `${ms.toFixed(ms < 10 ? 2 : 1)} ms`;
export const fmtRate = (mibs: number): string => `${mibs.toFixed(0)} MiB/s`;
export const fmtRatio = (r: number): string => (Number.isFinite(r) ? `${r.toFixed(2)}x` : "-");
export const fmtMiB = (bytes: number): string => `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;

export function fmtBytes(bytes: number): string {
  if (bytes >= 1 << 30 && bytes % (1 << 30) === 0) return `${bytes / (1 << 30)} GiB`;
  if (bytes >= 1 << 20) return `${(bytes / (1 << 20)).toFixed(bytes % (1 << 20) ? 1 : 0)} MiB`;
  return `${bytes} B`;
}

/** "met" / "MISSED" for a goal; benchmarks report, they do not fail. */
export function verdict(ok: boolean): string {
  return ok ? "met" : "MISSED";
}

export function printMachine(): void {
  const cpus = os.cpus();
  const load = os.loadavg().map((l) => l.toFixed(2)).join(" ");
  console.log(`machine: ${cpus.length} cores (${cpus[0]?.model.trim() ?? "?"}), ${fmtMiB(os.totalmem())} RAM, ${os.platform()} ${os.release()}`);
  console.log(`node ${process.version}, load average ${load}`);
  console.log("note: this machine is shared and noisy: compare ratios against the baseline of the same run, not absolute numbers across runs.");
}

/** A positive integer from the environment, or `fallback`. Accepts suffixes k, M, G (powers of 1024). */
export function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  const m = /^(\d+)\s*([kKmMgG]?)i?[bB]?$/.exec(raw.trim());
  if (!m) throw new Error(`${name}=${raw}: expected a positive integer, optionally with k, M or G`);
  const mult = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2]!.toLowerCase() as "" | "k" | "m" | "g"];
  const v = Number(m[1]) * mult;
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`${name}=${raw}: expected a positive integer`);
  return v;
}
