// Running the host tools a template build needs (debootstrap, chroot, cp,
// mkfs.ext4), with the tail of their output kept for error messages, and
// the numbered build steps the CLI shows.
import { spawn } from "node:child_process";
import { findExecutable } from "../host/executables.js";

/** A build step failed: which one, and the tail of what the failing command printed. */
export class BuildStepError extends Error {
  constructor(
    readonly step: string,
    message: string,
    readonly outputTail = "",
  ) {
    super(`${step} failed: ${message}${outputTail ? `\n--- last output ---\n${outputTail}` : ""}`);
    this.name = "BuildStepError";
  }
}

/** A precondition (root, a missing tool) that no retry fixes. */
export class BuildSetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BuildSetupError";
  }
}


export function requireTool(name: string, env: NodeJS.ProcessEnv = process.env): string {
  const file = findExecutable(name, undefined, env);
  if (!file) throw new BuildSetupError(`${name} not found: run scripts/setup-host (or apt-get install debootstrap e2fsprogs)`);
  return file;
}

export function requireRoot(): void {
  if (process.getuid?.() !== 0) throw new BuildSetupError("template build needs root (debootstrap, chroot); run as root or with sudo");
}

/** Environment for commands run in a chroot: predictable, non-interactive, nothing from the host's locale. */
export function chrootEnv(): NodeJS.ProcessEnv {
  return {
    PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME: "/root",
    LANG: "C.UTF-8",
    LC_ALL: "C.UTF-8",
    DEBIAN_FRONTEND: "noninteractive",
    DEBCONF_NONINTERACTIVE_SEEN: "true",
    TERM: "dumb",
  };
}

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Every output line, as it comes (for --verbose). */
  onLine?: (line: string) => void;
  /** Bytes of output kept for the error message (default 4 KiB). */
  tailBytes?: number;
}

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The last `tailBytes` of stdout and stderr, interleaved as they came. */
  tail: string;
  error?: Error;
}

export function runCommand(file: string, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  const max = opts.tailBytes ?? 4096;
  return new Promise((resolve) => {
    let tail = "";
    let partial = "";
    const child = spawn(file, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ["ignore", "pipe", "pipe"] });
    const onData = (chunk: Buffer) => {
      const text = chunk.toString("utf8");
      tail = (tail + text).slice(-max * 2);
      if (opts.onLine) {
        const lines = (partial + text).split("\n");
        partial = lines.pop() ?? "";
        for (const l of lines) opts.onLine(l.replace(/\r$/, ""));
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    let error: Error | undefined;
    child.on("error", (err) => (error = err));
    child.on("close", (code, signal) => {
      if (opts.onLine && partial) opts.onLine(partial);
      // Cut to `max`, dropping the first line when it was cut in the middle.
      const cut = tail.length > max ? tail.slice(-max).replace(/^[^\n]*\n/, "") : tail;
      resolve({ code, signal, tail: cut.trimEnd(), error });
    });
  });
}

/** Runs a command and throws a BuildStepError for `step` unless it exits 0; returns its output tail. */
export async function mustRun(step: string, file: string, args: string[], opts: RunOptions = {}): Promise<string> {
  const r = await runCommand(file, args, opts);
  if (r.error) throw new BuildStepError(step, `cannot run ${file}: ${r.error.message}`);
  if (r.code !== 0) {
    const how = r.signal ? `was killed by ${r.signal}` : `exited ${r.code}`;
    throw new BuildStepError(step, `${[file, ...args].map(quote).join(" ")} ${how}`, r.tail);
  }
  return r.tail;
}

function quote(s: string): string {
  const short = s.length > 120 ? `${s.slice(0, 117)}...` : s;
  return /^[\w@%+=:,./-]+$/.test(short) ? short : `'${short.replace(/'/g, "'\\''")}'`;
}

export interface StepEvent {
  /** 1-based. */
  index: number;
  total: number;
  title: string;
  state: "start" | "done" | "cached" | "failed";
  /** Elapsed seconds (done, cached, failed). */
  seconds?: number;
  /** A short result, e.g. "cached" or "812 MiB". */
  note?: string;
}

/** Numbered steps with timing; a step's failure becomes a BuildStepError naming it. */
export class Steps {
  private index = 0;

  constructor(
    readonly total: number,
    private readonly progress?: (e: StepEvent) => void,
  ) {}

  /** Runs one step; `fn` may return a note (shown after the time) or call `cached()` on its handle. */
  async run<T>(title: string, fn: (step: { cached(note?: string): void; note(note: string): void; title: string }) => Promise<T>): Promise<T> {
    const index = ++this.index;
    const started = performance.now();
    let state: StepEvent["state"] = "done";
    let note: string | undefined;
    this.progress?.({ index, total: this.total, title, state: "start" });
    const seconds = () => Math.round((performance.now() - started) / 100) / 10;
    try {
      const out = await fn({
        title,
        cached: (n) => {
          state = "cached";
          note = n ?? note;
        },
        note: (n) => (note = n),
      });
      this.progress?.({ index, total: this.total, title, state, seconds: seconds(), ...(note ? { note } : {}) });
      return out;
    } catch (err) {
      this.progress?.({ index, total: this.total, title, state: "failed", seconds: seconds() });
      if (err instanceof BuildStepError || err instanceof BuildSetupError) throw err;
      throw new BuildStepError(title, err instanceof Error ? err.message : String(err));
    }
  }
}

/** "41.2 s", "850 ms". */
export function formatSeconds(s: number): string {
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`;
}

export function formatBytes(n: number): string {
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(0)} KiB`;
  if (n < 1024 * 1024 * 1024) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 / 1024 / 1024).toFixed(2)} GiB`;
}
