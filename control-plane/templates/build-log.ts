// One build's log: entries appended as the build runs, kept in memory while
// it runs (the SDKs poll every 200 ms from an offset) and in a JSON-lines
// file under the data dir, so logs survive the build and the server.
import { appendFileSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import type { BuildLogEntry } from "../domain/template.js";

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
