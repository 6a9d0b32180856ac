// Tells when certificate files may have changed. The folders holding them
// are watched, not the files: renewals replace files (certbot swaps the
// symlinks in live/, Kubernetes swaps the `..data` link of a mounted
// secret, editors and `mv` write a new inode), which a watch on the old file
// never sees. A slow poll covers file systems without change events (NFS).
import { watch, type FSWatcher } from "node:fs";
import { basename, dirname, resolve } from "node:path";
import type { Logger } from "pino";

/** Events of one change come in bursts (a cert and its key, a temp file then a rename): one call after the burst. */
const SETTLE_MS = 250;
const POLL_MS = 60_000;

export interface FileWatch {
  close(): void;
}

/** Calls `onChange` (after SETTLE_MS of quiet) whenever something changed in a folder holding one of `files`, and every minute. */
export function watchFiles(files: string[], onChange: () => void, log: Logger): FileWatch {
  let timer: NodeJS.Timeout | undefined;
  const fire = () => {
    clearTimeout(timer);
    timer = setTimeout(onChange, SETTLE_MS);
    timer.unref();
  };
  const watchers: FSWatcher[] = [];
  const dirs = new Map<string, Set<string>>();
  for (const f of files.map((f) => resolve(f))) {
    const names = dirs.get(dirname(f)) ?? new Set<string>();
    names.add(basename(f));
    dirs.set(dirname(f), names);
  }
  for (const [dir, names] of dirs) {
    try {
      const w = watch(dir, { persistent: false }, (_event, name) => {
        // Our files, links the platform swaps (`..data`), or an event without a name: look.
        if (name === null || names.has(String(name)) || String(name).startsWith("..")) fire();
      });
      w.on("error", (err) => log.warn({ err: err.message, dir }, "TLS: cannot watch the certificate folder any more; checking it every minute"));
      watchers.push(w);
    } catch (err) {
      log.warn({ err: (err as Error).message, dir }, "TLS: cannot watch the certificate folder; checking it every minute");
    }
  }
  const poll = setInterval(onChange, POLL_MS);
  poll.unref();
  return {
    close() {
      clearTimeout(timer);
      clearInterval(poll);
      for (const w of watchers) w.close();
    },
  };
}
