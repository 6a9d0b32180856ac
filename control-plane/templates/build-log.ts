// One build's log: entries appended as the build runs, kept in memory while
// it runs (the SDKs poll every 200 ms from an offset) and in a JSON-lines
// file under the data dir, so logs survive the build and the server.
import { appendFileSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import type { BuildLogEntry, TemplateBuildRecord } from "../domain/template.js";

/** A line longer than this is cut (a progress bar without newlines, a binary blob). */
const MAX_MESSAGE = 8 * 1024;
/** Past this many entries a build's log stops, saying so once. */
const MAX_ENTRIES = 200_000;

const LEVELS = ["debug", "info", "warn", "error"] as const;

export function levelAtLeast(entry: BuildLogEntry, min: BuildLogEntry["level"] | undefined): boolean {
  return min === undefined || LEVELS.indexOf(entry.level) >= LEVELS.indexOf(min);
}

export class BuildLog {
  private entries: BuildLogEntry[] | undefined;
  private full = false;
  private removed = false;
  private readonly listeners = new Set<(entry: BuildLogEntry) => void>();

  constructor(readonly file: string) {}

  /** Appends an entry (to memory and the file). */
  add(entry: BuildLogEntry): void {
    if (this.removed) return;
    const list = this.load();
    if (list.length >= MAX_ENTRIES) {
      if (this.full) return;
      this.full = true;
      entry = { ...entry, level: "warn", message: `the build log reached ${MAX_ENTRIES} entries: later output is not kept` };
    }
    const kept = entry.message.length > MAX_MESSAGE ? { ...entry, message: `${entry.message.slice(0, MAX_MESSAGE)}… (cut)` } : entry;
    list.push(kept);
    mkdirSync(dirname(this.file), { recursive: true });
    appendFileSync(this.file, `${JSON.stringify(kept)}\n`);
    for (const listener of this.listeners) listener(kept);
  }

  /** Calls `listener` with each entry added from now on (a watch of the build: api/connect/build-watch.ts); returns its removal. */
  subscribe(listener: (entry: BuildLogEntry) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Every entry, oldest first. */
  all(): BuildLogEntry[] {
    return this.load();
  }

  get size(): number {
    return this.load().length;
  }

  /** Drops the in-memory copy (a finished build's log is read back from its file when asked). */
  release(): void {
    this.entries = undefined;
  }

  /** The build's template was deleted: its log goes, and what the build still reports is dropped. */
  remove(): void {
    this.removed = true;
    this.entries = [];
    rmSync(this.file, { force: true });
  }

  private load(): BuildLogEntry[] {
    if (this.entries) return this.entries;
    let text = "";
    try {
      text = readFileSync(this.file, "utf8");
    } catch {
      // no log yet
    }
    this.entries = text
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as BuildLogEntry);
    return this.entries;
  }
}

/** GET .../status: entries from `offset` (at most `limit`, at least `level`), and for a failed build the lines that say why. */
export function statusPage(
  build: Pick<TemplateBuildRecord, "status" | "reason">,
  all: BuildLogEntry[],
  o: { offset: number; limit: number; level?: BuildLogEntry["level"] },
): { entries: BuildLogEntry[]; reasonEntries: BuildLogEntry[] } {
  const entries = all.slice(o.offset).filter((e) => levelAtLeast(e, o.level)).slice(0, o.limit);
  const reasonEntries = build.status === "error" ? all.filter((e) => e.level !== "debug" && (build.reason?.step === undefined || e.step === build.reason.step)).slice(-20) : [];
  return { entries, reasonEntries };
}

/** GET .../logs: entries from a timestamp cursor, forward or backward (newest first). */
export function logsPage(all: BuildLogEntry[], o: { cursor?: number; limit: number; direction: "forward" | "backward"; level?: BuildLogEntry["level"] }): BuildLogEntry[] {
  const shown = all.filter((e) => levelAtLeast(e, o.level));
  if (o.direction === "backward") {
    const before = o.cursor === undefined ? shown : shown.filter((e) => e.timestamp <= o.cursor!);
    return before.slice(-o.limit).reverse();
  }
  const after = o.cursor === undefined ? shown : shown.filter((e) => e.timestamp >= o.cursor!);
  return after.slice(0, o.limit);
}
