import { lstat } from "node:fs/promises";
import { errnoOf } from "./errors.js";

const STAT_CONCURRENCY = 32;

/** What the watcher remembers of a directory entry to classify changes. */
export interface Snap {
  dev: bigint;
  ino: bigint;
  dir: boolean;
  size: bigint;
  mtimeNs: bigint;
  mode: bigint;
  uid: bigint;
  gid: bigint;
}

/** A snapshot, null when the path is gone, "error" when it cannot be told. */
export type Stat = Snap | null | "error";

export async function snapshot(path: string | Buffer): Promise<Stat> {
  try {
    const st = await lstat(path, { bigint: true });
    return {
      dev: st.dev,
      ino: st.ino,
      dir: st.isDirectory(),
      size: st.size,
      mtimeNs: st.mtimeNs,
      mode: st.mode,
      uid: st.uid,
      gid: st.gid,
    };
  } catch (err) {
    const code = errnoOf(err);
    return code === "ENOENT" || code === "ENOTDIR" ? null : "error";
  }
}

export async function mapLimit<T, R>(items: T[], fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += STAT_CONCURRENCY) {
    out.push(...(await Promise.all(items.slice(i, i + STAT_CONCURRENCY).map(fn))));
  }
  return out;
}

/** A watch failure with advice when the inotify limits are the cause. */
export function watchError(path: string, err: unknown): Error {
  const code = errnoOf(err);
  if (code === "ENOSPC" || code === "EMFILE") {
    return Object.assign(
      new Error(
        `cannot watch ${path}: the inotify watch limit is reached (raise fs.inotify.max_user_watches / max_user_instances or watch a smaller tree)`,
      ),
      { code },
    );
  }
  return err instanceof Error ? err : new Error(String(err));
}
