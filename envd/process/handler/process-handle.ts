import type { IPty } from "@lydell/node-pty";
import { Code, ConnectError } from "@connectrpc/connect";
import { spawn } from "node:child_process";
import type { EventEmitter } from "node:events";
import { createRequire } from "node:module";
import type { Readable, Writable } from "node:stream";
import { execFailureOf, precheckExec, reporter, unreportable, type ExecFailure } from "./exec-failure.js";
import { exitStatus, type ExitStatus } from "./exit-status.js";
import { Multiplexer, type Sized } from "./multiplex.js";
import { raisesChildOomScore, withChildOomScore } from "./oom-score.js";
import type { PooledPipe } from "./pooled-pipe.js";
import { withShellFallback } from "./shell-fallback.js";
import { spawnHelper } from "./spawn-helper.js";
import { spawnTurn } from "./spawn-turns.js";

/**
 * node-pty, loaded on the first PTY: a native addon most sandboxes never
 * use, so envd's start-up (and /health) does not wait for it.
 */
let ptyModule: typeof import("@lydell/node-pty") | undefined;
function spawnPty(...args: Parameters<typeof import("@lydell/node-pty").spawn>): IPty {
  ptyModule ??= createRequire(import.meta.url)("@lydell/node-pty") as typeof import("@lydell/node-pty");
  return ptyModule.spawn(...args);
}

export type OutputKind = "stdout" | "stderr" | "pty";

export interface Output extends Sized {
  kind: OutputKind;
  data: Uint8Array;
}

export interface SpawnSpec {
  cmd: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** Set only when envd may switch users (it runs as root). */
  uid?: number;
  gid?: number;
  /** Pipe stdin (true) or give the process /dev/null (false). Ignored for PTYs. */
  stdin: boolean;
  pty?: { cols: number; rows: number };
}

/** A started child as Node's ChildProcess or the spawn helper's stand-in for one presents it. */
interface Child extends EventEmitter {
  readonly pid?: number;
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  readonly stderr: Readable | null;
  /** The spawn helper's children: output read into pooled buffers. */
  readonly output?: { stdout: PooledPipe; stderr: PooledPipe };
}

/**
 * Starts a child with pipes, through the spawn helper where the init gave
 * envd one (spawn-helper.ts), else with Node; rejects with the spawn error
 * (ENOENT, …) when it could not be started.
 */
async function spawnChild(spec: SpawnSpec): Promise<Child> {
  const helper = await spawnHelper();
  if (helper) return helper.spawn({ ...spec, oom: raisesChildOomScore() });
  // Node forks all of envd, synchronously: one fork per turn of the event loop (spawn-turns.ts).
  await spawnTurn();
  const child = withChildOomScore(() => spawn(spec.cmd, spec.args, {
    cwd: spec.cwd,
    env: spec.env,
    uid: spec.uid,
    gid: spec.gid,
    stdio: [spec.stdin ? "pipe" : "ignore", "pipe", "pipe"],
    detached: true,
  }));
  return new Promise<Child>((resolve, reject) => {
    child.once("spawn", () => resolve(child));
    child.once("error", reject);
  });
}

function startError(spec: SpawnSpec, err: unknown): ConnectError {
  return new ConnectError(`error starting process '${spec.cmd}': ${(err as Error).message}`, Code.InvalidArgument);
}

/** A failure no process can report (no /bin/sh in the sandbox) is the start's error. */
function throwUnreportable(spec: SpawnSpec, failure: ExecFailure): void {
  const why = unreportable(spec.cmd, failure);
  if (why) throw new ConnectError(`error starting process: ${why}`, Code.InvalidArgument);
}

/**
 * One running process: its output multiplexer, stdin, signals, PTY size and
 * exit. `end` is known only after the output pipes closed (so no output is
 * lost), except after a KILL/TERM (or the deadline), when descendants still
 * holding the pipes must not hold the end back.
 */
export class ProcessHandle {
  readonly mux = new Multiplexer<Output>();
  readonly pid: number;
  readonly isPty: boolean;
  /** Set once the process has ended and its output is fully published. */
  exit: ExitStatus | undefined;
  readonly done: Promise<ExitStatus>;

  private readonly child: Child | undefined;
  private readonly pty: IPty | undefined;
  private stdinOpen: boolean;
  private signalled = false;
  /** The leader's exit, known before its pipes close. */
  private exitedStatus: ExitStatus | undefined;
  private deadline: NodeJS.Timeout | undefined;
  private resolveDone!: (s: ExitStatus) => void;

  private constructor(spec: SpawnSpec, child: Child | undefined, pty: IPty | undefined) {
    this.child = child;
    this.pty = pty;
    this.isPty = pty !== undefined;
    this.pid = (pty?.pid ?? child?.pid)!;
    this.stdinOpen = !this.isPty && spec.stdin;
    this.done = new Promise((r) => (this.resolveDone = r));
  }

  /**
   * Spawns the process. A command that cannot be executed still starts, as
   * on E2B's envd: a process that reports why on stderr (the PTY) and exits
   * 127/126 runs in its place (exec-failure.ts). Rejects with
   * `invalid_argument` when nothing can be started at all.
   */
  static async spawn(requested: SpawnSpec): Promise<ProcessHandle> {
    const spec = withShellFallback(requested);
    if (spec.pty) {
      await spawnTurn();
      const failure = precheckExec(spec.cmd, spec.env.PATH);
      if (failure) throwUnreportable(spec, failure);
      return ProcessHandle.spawnPty(failure ? reporter(spec, failure) : spec, spec.pty);
    }
    let child: Child;
    try {
      child = await spawnChild(spec);
    } catch (err) {
      const failure = execFailureOf(spec.cmd, err);
      if (!failure) throw startError(spec, err);
      throwUnreportable(spec, failure);
      child = await spawnChild(reporter(spec, failure)).catch((again: unknown) => {
        throw startError(spec, again);
      });
    }
    const handle = new ProcessHandle(spec, child, undefined);
    handle.wireChild(child);
    return handle;
  }

  private static spawnPty(spec: SpawnSpec, size: { cols: number; rows: number }): ProcessHandle {
    let pty: IPty;
    try {
      pty = withChildOomScore(() => spawnPty(spec.cmd, spec.args, {
        name: spec.env.TERM ?? "xterm-256color",
        cols: size.cols || 80,
        rows: size.rows || 24,
        cwd: spec.cwd,
        env: spec.env,
        uid: spec.uid,
        gid: spec.gid,
        encoding: null,
      } as Parameters<typeof spawnPty>[2]));
    } catch (err) {
      throw new ConnectError(`error starting pty process: ${(err as Error).message}`, Code.InvalidArgument);
    }
    const handle = new ProcessHandle(spec, undefined, pty);
    handle.wirePty(pty);
    return handle;
  }

  /** Publishes `stream`'s output; a full subscriber pauses it until every one has drained. */
  private pump(stream: Readable, kind: OutputKind, pooled?: PooledPipe): void {
    const publish = (data: Buffer, release?: () => void, size = data.length): boolean => {
      const wait = this.mux.publish({ kind, data, size, release });
      if (!wait) return true;
      stream.pause();
      void wait.then(() => stream.resume());
      return false;
    };
    if (pooled) pooled.attach(publish);
    else stream.on("data", (chunk: Buffer) => void publish(chunk));
    stream.on("error", () => undefined); // EPIPE etc.: the exit path reports the end
  }

  private wireChild(child: Child): void {
    this.pump(child.stdout!, "stdout", child.output?.stdout);
    this.pump(child.stderr!, "stderr", child.output?.stderr);
    child.stdin?.on("error", () => undefined);
    child.once("exit", (code, signal) => {
      this.exitedStatus = exitStatus(code, signal);
      if (this.signalled) this.finishWithoutPipes();
    });
    child.once("close", (code, signal) => this.finish(this.exitedStatus ?? exitStatus(code, signal)));
  }

  private wirePty(pty: IPty): void {
    pty.onData((data: string | Buffer) => {
      const buf = typeof data === "string" ? Buffer.from(data) : data;
      const wait = this.mux.publish({ kind: "pty", data: buf, size: buf.length });
      if (wait) {
        pty.pause();
        void wait.then(() => pty.resume());
      }
    });
    pty.onExit(({ exitCode, signal }) => this.finish(exitStatus(exitCode, signal || null)));
  }

  /** After KILL/TERM: report the end now, even if descendants still hold the pipes. */
  private finishWithoutPipes(): void {
    if (!this.exitedStatus) return;
    this.child?.stdout?.destroy();
    this.child?.stderr?.destroy();
    this.finish(this.exitedStatus);
  }

  private finish(status: ExitStatus): void {
    if (this.exit) return;
    clearTimeout(this.deadline);
    this.exit = status;
    this.stdinOpen = false;
    this.mux.close();
    this.resolveDone(status);
  }

  /** Kills the process (leader only) when `ms` elapse: Connect-Timeout-Ms is its lifetime. */
  setLifetime(ms: number): void {
    if (ms <= 0) return;
    this.deadline = setTimeout(() => this.signal("SIGKILL"), ms);
    this.deadline.unref();
  }

  signal(sig: "SIGKILL" | "SIGTERM"): void {
    if (this.exit) return;
    this.signalled = true;
    if (this.exitedStatus) {
      // The leader is gone; only descendants hold the output open.
      this.finishWithoutPipes();
      return;
    }
    try {
      if (this.pty) this.pty.kill(sig);
      else process.kill(this.pid, sig);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ESRCH") {
        throw new ConnectError(`error sending signal: ${(err as Error).message}`, Code.Internal);
      }
    }
  }

  async writeStdin(data: Uint8Array): Promise<void> {
    if (this.isPty) throw new ConnectError("error writing to stdin: process is a PTY, send input as pty", Code.Internal);
    const stdin = this.child?.stdin;
    if (!stdin || !this.stdinOpen || stdin.destroyed || stdin.writableEnded) {
      throw new ConnectError("error writing to stdin: stdin is not open (start the process with stdin: true)", Code.Internal);
    }
    await new Promise<void>((resolve, reject) =>
      stdin.write(data, (err) =>
        err ? reject(new ConnectError(`error writing to stdin: ${err.message}`, Code.Internal)) : resolve(),
      ),
    );
  }

  async writePty(data: Uint8Array): Promise<void> {
    if (!this.pty) throw new ConnectError("error writing to pty: tty not assigned", Code.Internal);
    if (this.exit) throw new ConnectError("error writing to pty: process has exited", Code.Internal);
    this.pty.write(Buffer.from(data) as unknown as string);
  }

  closeStdin(): void {
    if (this.isPty) {
      throw new ConnectError("cannot close stdin of a PTY process: send Ctrl-D (0x04) as pty input instead", Code.Unknown);
    }
    this.stdinOpen = false;
    this.child?.stdin?.end();
  }

  resize(cols: number, rows: number): void {
    if (!this.pty) throw new ConnectError("error resizing tty: tty not assigned", Code.Internal);
    if (!cols || !rows) throw new ConnectError("pty size needs cols and rows greater than 0", Code.InvalidArgument);
    if (this.exit) return;
    this.pty.resize(cols, rows);
  }
}
