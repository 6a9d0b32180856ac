// The microVM's console log (<dir>/console.log: the guest's serial output
// and Firecracker's own messages) as timestamped lines for the logs endpoints.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";

/** At most this much of the end of the log is read. */
const MAX_BYTES = 256 * 1024;
const MAX_LINES = 1_000;

/** Firecracker's `2024-05-01T12:34:56.123456789 [id:main] …`. */
const VMM_TIME = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s/;
/** The kernel's `[    1.234567] …`: seconds since the guest booted. */
const KERNEL_TIME = /^\[\s*(\d+)\.(\d+)\]/;

/**
 * The log's last lines, newest last. A line's time is its own when it has one
 * (Firecracker's wall clock, or the kernel's seconds since boot added to
 * `bootedAt`), else the time of the line before it; never later than now or
 * earlier than the line before.
 */
export function consoleLines(path: string, bootedAt: number, now = Date.now()): { timestamp: number; line: string }[] {
  let text = "";
  let mtime = now;
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const st = fstatSync(fd);
    mtime = st.mtimeMs;
    const len = Math.min(st.size, MAX_BYTES);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, st.size - len);
    text = buf.toString("utf8");
    if (len < st.size) text = text.slice(text.indexOf("\n") + 1); // drop the partial first line
  } catch {
    return [];
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  const lines = text.split("\n").map((l) => l.replace(/\r$/, "")).filter((l) => l.length > 0).slice(-MAX_LINES);
  const out: { timestamp: number; line: string }[] = [];
  let last = bootedAt > 0 ? Math.min(bootedAt, mtime) : mtime;
  for (const line of lines) {
    let t: number | undefined;
    const vmm = VMM_TIME.exec(line);
    if (vmm) {
      const parsed = Date.parse(vmm[1]!);
      if (Number.isFinite(parsed)) t = parsed;
    } else if (bootedAt > 0) {
      const k = KERNEL_TIME.exec(line);
      if (k) t = bootedAt + Number(k[1]) * 1000 + Math.floor(Number(`0.${k[2]}`) * 1000);
    }
    if (t !== undefined) last = Math.min(Math.max(t, last), now);
    out.push({ timestamp: last, line });
  }
  return out;
}
