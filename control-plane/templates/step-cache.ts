// Each build step's result, kept by the step's cache key (steps.ts: the hash
// of everything before it): the build sandbox's files after the step (a
// filesystem snapshot of its runtime) and the build's state then (ENV, USER,
// WORKDIR, ARG). A rebuild starts from the last step whose key is here and
// runs the rest. Steps that change no files (ENV, ARG) keep no files of their
// own: their entry points at the entry that has them. The cache is per host,
// bounded in size; the entries used longest ago go first.
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { mustRun } from "../images/template-exec.js";
import { pidAlive } from "../host/pids.js";

/** What a build knows at a step besides its files. */
export interface BuildState {
  envs: Record<string, string>;
  user: string;
  workdir: string;
  args: Record<string, string>;
}

interface Entry {
  state: BuildState;
  /** The key of the entry whose folder holds the files (itself, or an earlier one). */
  files: string;
  runtime: string;
}

export class StepCache {
  constructor(
    readonly dir: string,
    private readonly maxBytes: number,
  ) {}

  private entryDir(key: string): string {
    return join(this.dir, key);
  }

  /** The state and the folder of files (a runtime's filesystem snapshot) of a step, if cached for `runtime`. */
  get(key: string, runtime: string): { state: BuildState; filesDir: string } | undefined {
    try {
      const e = JSON.parse(readFileSync(join(this.entryDir(key), "entry.json"), "utf8")) as Entry;
      if (e.runtime !== runtime) return undefined;
      const filesDir = this.entryDir(e.files);
      if (!existsSync(join(filesDir, "entry.json"))) return undefined;
      const now = new Date();
      utimesSync(this.entryDir(key), now, now);
      utimesSync(filesDir, now, now);
      return { state: e.state, filesDir };
    } catch {
      return undefined;
    }
  }

  /** A folder to snapshot a step's files into; `commit` makes it the entry `key`. */
  staging(key: string): { dir: string; commit: (state: BuildState, runtime: string) => void; discard: () => void } {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const dir = join(this.dir, `.tmp-${key}-${process.pid}-${Date.now()}`);
    mkdirSync(dir, { mode: 0o700 });
    return {
      dir,
      commit: (state, runtime) => {
        writeFileSync(join(dir, "entry.json"), JSON.stringify({ state, files: key, runtime } satisfies Entry));
        rmSync(this.entryDir(key), { recursive: true, force: true });
        renameSync(dir, this.entryDir(key));
      },
      discard: () => rmSync(dir, { recursive: true, force: true }),
    };
  }

  /** An entry that keeps no files of its own: they are `filesKey`'s. */
  putState(key: string, state: BuildState, filesKey: string, runtime: string): void {
    const s = this.staging(key);
    writeFileSync(join(s.dir, "entry.json"), JSON.stringify({ state, files: filesKey, runtime } satisfies Entry));
    rmSync(this.entryDir(key), { recursive: true, force: true });
    renameSync(s.dir, this.entryDir(key));
  }

  /** Removes the entries used longest ago until the cache fits in its size; leftovers of builds cut short too. */
  async prune(): Promise<string[]> {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return [];
    }
    const removed: string[] = [];
    // Staging folders of builds cut short: their server is gone. Another live server's (a shared image cache) are its own.
    for (const n of names.filter((n) => n.startsWith(".tmp-"))) {
      const pid = Number(n.split("-").at(-2));
      if (pid !== process.pid && !pidAlive(pid)) {
        rmSync(join(this.dir, n), { recursive: true, force: true });
        removed.push(n);
      }
    }
    const entries = [];
    for (const n of names.filter((n) => !n.startsWith("."))) {
      const p = join(this.dir, n);
      try {
        const bytes = Number((await mustRun("measure the step cache", "du", ["-s", "-B1", p])).split(/\s+/)[0]);
        entries.push({ n, p, bytes, used: statSync(p).mtimeMs });
      } catch {
        // gone meanwhile
      }
    }
    let total = entries.reduce((s, e) => s + e.bytes, 0);
    for (const e of entries.sort((a, b) => a.used - b.used)) {
      if (total <= this.maxBytes) break;
      rmSync(e.p, { recursive: true, force: true });
      total -= e.bytes;
      removed.push(e.n);
    }
    return removed;
  }
}
