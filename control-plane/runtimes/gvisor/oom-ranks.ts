// Which host process the kernel's OOM killer takes when a gVisor sandbox
// reaches its memory limit: the offender, not the sandbox.
//
// runsc 20240729 has no OOM killer of its own: the sandbox's memory is one
// memfd charged to its host cgroup, and a memcg OOM kills the host process
// with the highest badness. The sentry maps all of that memfd (its RSS is the
// sandbox's whole memory), so left alone it is the one killed, and the whole
// sandbox with it. Each guest address space is a systrap stub process whose
// RSS is that guest process's memory: killing a stub kills exactly that guest
// process (SIGKILL inside) and the sentry frees its memory (measured here).
// So every stub gets oom_score_adj 1000, except the stubs of the init and of
// envd; the sentry and the gofer keep theirs. The kernel then picks, by size,
// among the sandbox's own processes. New stubs are cloned by a template stub
// and inherit its 1000; a poll raises any stub that did not.
// Lowering a score needs CAP_SYS_RESOURCE, which a host may not give; raising
// never does, so the ranking only ever raises.
import { readFileSync, writeFileSync } from "node:fs";
import type { Logger } from "pino";
import { GUEST } from "../../images/layout.js";

/** The files only the init's and envd's address spaces map (their executables). */
const KEPT_EXECUTABLES = [GUEST.init, GUEST.node];
export const STUB_OOM_SCORE_ADJ = 1000;

function read(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** runsc's own processes (the sentry is `runsc-sandbox`, the gofer `runsc-gofer`): never ranked first. */
export function isRunscProcess(cmdline: string): boolean {
  return /^runsc-(sandbox|gofer)\0/.test(cmdline) || cmdline.startsWith("runsc\0");
}

/** Which of the init's and envd's executables a stub's address space (its /proc/<pid>/maps) maps. */
export function keptExecutableOf(maps: string, kept: readonly string[] = KEPT_EXECUTABLES): string | undefined {
  for (const line of maps.split("\n")) {
    const exe = kept.find((e) => line.endsWith(e));
    if (exe) return exe;
  }
  return undefined;
}

export class OomRanks {
  /** Host pids left as they are: runsc's processes, and the init's and envd's stubs. */
  private readonly kept = new Set<number>();
  private readonly raised = new Set<number>();
  /** Which kept executables have been found; settled once both were (the init starts envd at once). */
  private readonly found = new Set<string>();
  private warned = false;

  constructor(private readonly log: Logger) {}

  /** True once the init's and envd's stubs are found: from then on every new stub is raised. */
  get settled(): boolean {
    return this.found.size === KEPT_EXECUTABLES.length;
  }

  /**
   * Ranks the sandbox's host processes (its cgroup's). Until the init's and
   * envd's stubs are found (they start before envd answers, so before any
   * command of the user's), stubs mapping their executables are kept; every
   * other stub is raised. Later, only the init's executable keeps a stub: envd's
   * spawn helper is `locale2b-init --spawn-helper`, which may start (or start
   * again) after envd answers; a user's own process running it only changes who
   * goes first in its own sandbox.
   */
  update(pids: number[]): void {
    const live = new Set(pids);
    for (const set of [this.kept, this.raised]) for (const pid of set) if (!live.has(pid)) set.delete(pid);
    const wasSettled = this.settled;
    for (const pid of pids) {
      if (this.kept.has(pid) || this.raised.has(pid)) continue;
      const cmdline = read(`/proc/${pid}/cmdline`);
      if (cmdline === undefined) continue; // gone
      const exe = isRunscProcess(cmdline) ? undefined : keptExecutableOf(read(`/proc/${pid}/maps`) ?? "", wasSettled ? [GUEST.init] : KEPT_EXECUTABLES);
      if (isRunscProcess(cmdline) || exe) {
        this.kept.add(pid);
        if (exe) this.found.add(exe);
        continue;
      }
      try {
        writeFileSync(`/proc/${pid}/oom_score_adj`, String(STUB_OOM_SCORE_ADJ));
        this.raised.add(pid);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT" || (err as NodeJS.ErrnoException).code === "ESRCH") continue;
        if (!this.warned) this.log.warn({ err, pid }, "cannot raise the OOM score of a sandbox process: out of memory, the kernel may stop the whole sandbox");
        this.warned = true;
      }
    }
    if (!wasSettled && this.settled) this.log.debug({ kept: [...this.kept], raised: this.raised.size }, "OOM ranks: the sandbox's processes go first, its init, envd and runsc last");
  }
}
