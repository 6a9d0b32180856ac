// Reading the end of a sandbox's log file (its console, envd's log, runsc's):
// never the whole file, which what runs inside can make as large as it likes.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";

/** The last `maxLines` non-blank lines among the file's last `maxBytes` (the first, partial line dropped when cut). */
export function tailLines(path: string, maxLines: number, maxBytes = 256 * 1024): string[] {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return [];
  }
  try {
    const size = fstatSync(fd).size;
    const len = Math.min(size, maxBytes);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    const lines = buf.toString("utf8").split(/\r?\n/);
    if (len < size) lines.shift();
    return lines.filter((l) => l.trim() !== "").slice(-maxLines);
  } finally {
    closeSync(fd);
  }
}

/** A sandbox's log for the logs endpoints: its lines among the file's last 8 MiB, each with its time. */
export function logEntries(path: string): { timestamp: number; line: string }[] {
  return timedLines(tailLines(path, 100_000, 8 * 1024 * 1024), Date.now());
}

/** Log lines with their time: a JSON line's own `time` (pino's, ms), else `fallback` (e.g. the file's mtime or now). */
export function timedLines(lines: string[], fallback: number): { timestamp: number; line: string }[] {
  return lines.map((line) => {
    let timestamp = fallback;
    if (line.startsWith("{")) {
      try {
        const t = (JSON.parse(line) as { time?: unknown }).time;
        if (typeof t === "number") timestamp = t;
      } catch {
        // not JSON after all: keep the line as it is
      }
    }
    return { timestamp, line };
  });
}
