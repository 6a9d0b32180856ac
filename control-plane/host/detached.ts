// Starting a long-lived host process (a VMM, runsc) that must outlive the
// control plane: its own process group, stdout and stderr appended to a log
// file (never a pipe: a pipe would tie it to this process, and a sandbox that
// inherits it would hold the pipe open).
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import type { Logger } from "pino";

export interface DetachedOptions {
  /** Appended to (created when missing): the process's stdout and stderr. */
  logPath: string;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  log: Logger;
}

/** Spawns `file` detached (unref'd: the control plane may exit first); a spawn error is logged, and `pid` is then undefined. */
export function spawnDetached(file: string, args: string[], o: DetachedOptions): ChildProcess {
  const fd = openSync(o.logPath, "a");
  try {
    const child = spawn(file, args, { detached: true, stdio: ["ignore", fd, fd], ...(o.cwd ? { cwd: o.cwd } : {}), ...(o.env ? { env: o.env } : {}) });
    child.on("error", (err) => o.log.error({ err, file }, "cannot start a host process"));
    child.unref();
    return child;
  } finally {
    closeSync(fd);
  }
}
