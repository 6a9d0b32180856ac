// What volumes need from the host: root (each is a loop-mounted ext4 image),
// and the id shift of the process runtime's sandboxes (`user` inside is host
// uid base + 1000), so a volume's files belong to the same ids in every sandbox.
import { sandboxIdRange } from "../runtimes/process/id-map.js";
import { setting } from "../settings.js";
import type { VolumeIds } from "./volume-fs.js";

const DEFAULT_SIZE_MB = 10 * 1024;

/** The ids volumes are written with, or why volumes cannot be had here. */
export function volumeIds(): { ids: VolumeIds } | { unsupported: string } {
  if (process.getuid?.() !== 0) return { unsupported: "volumes need the server to run as root (each volume is a loop-mounted ext4 image)" };
  try {
    const r = sandboxIdRange();
    return { ids: { base: r.base, count: r.count } };
  } catch (err) {
    return { unsupported: `no id range for sandboxes: ${(err as Error).message}` };
  }
}

/** LOCALE2B_VOLUME_SIZE_MB, else 10 GiB. */
export function volumeSizeMB(): number {
  const raw = setting("LOCALE2B_VOLUME_SIZE_MB");
  if (raw === undefined || raw === "") return DEFAULT_SIZE_MB;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 16) throw new Error(`LOCALE2B_VOLUME_SIZE_MB=${raw}: expected a whole number of MiB, at least 16`);
  return n;
}
