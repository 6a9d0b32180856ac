// envd's processes started by `locale2b-init --spawn-helper`
// (rootfs/init/spawn.c), where the init that started envd says where it is
// (LOCALE2B_SPAWN_HELPER). Node forks all of envd for each child (about half
// of envd's CPU per command, more as its heap grows); the helper is small and
// starts each child with clone(CLONE_VM | CLONE_VFORK). What it hands back
// looks to ProcessHandle like a ChildProcess: pid, stdin/stdout/stderr
// streams, `exit` and then `close`. The pipes are the helper's: envd opens its
// own ends through /proc/<helper>/fd/<n>. Without the helper (or when it
// cannot be used here) envd spawns with Node, as before.
import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";
import { closeSync, constants as fsc, openSync } from "node:fs";
import net from "node:net";
import { constants as osc } from "node:os";
import { getSystemErrorName } from "node:util";
import type { SpawnSpec } from "./process-handle.js";
import { PooledPipe } from "./pooled-pipe.js";

const T_SPAWN = 1;
const T_CLOSE = 2;
const T_EXIT = 3;
const T_PING = 4;
const F_STDIN = 1;
const F_SETSID = 2;
const F_OOM = 4;
/** How often the processes of a helper that died are checked for their end (they are no longer reaped by it). */
const ORPHAN_POLL_MS = 100;
/** At the latest, the helper's copies of a started child's pipes are closed this long after envd opened its own. */
const CLOSE_IDLE_MS = 25;
/** A helper that keeps dying is given up for Node's own spawn. */
const MAX_STARTS = 5;

const SIGNAL_NAMES = new Map(Object.entries(osc.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

/** What to start (PTYs are node-pty's), and whether to raise its oom_score_adj to 500 (oom-score.ts). */
export type HelperSpawnSpec = Omit<SpawnSpec, "pty"> & { oom: boolean };

/** What ProcessHandle uses of a ChildProcess. */
export interface SpawnedChild extends EventEmitter {
  readonly pid: number;
  readonly stdin: net.Socket | null;
  readonly stdout: net.Socket;
  readonly stderr: net.Socket;
  /** stdout's and stderr's chunks, read into pooled buffers (their sockets emit no `data`). */
  readonly output: { stdout: PooledPipe; stderr: PooledPipe };
}

class HelperChild extends EventEmitter implements SpawnedChild {
  private status: [number | null, NodeJS.Signals | null] | undefined;
  private open = 2;
  private exitEmitted = false;

  readonly stdout: net.Socket;
  readonly stderr: net.Socket;

  constructor(
    readonly pid: number,
    readonly output: { stdout: PooledPipe; stderr: PooledPipe },
    readonly stdin: net.Socket | null,
  ) {
    super();
    const { stdout, stderr } = output;
    this.stdout = stdout.socket;
    this.stderr = stderr.socket;
    for (const s of [this.stdout, this.stderr]) s.once("close", () => (--this.open, this.maybeClose()));
    this.once("exit", () => (this.exitEmitted = true));
  }

  /** The helper reported the end; told a turn later, as Node does, so whoever just got this child is listening. */
  exited(wait: number): void {
    if (this.status) return;
    const sig = wait & 0x7f;
    const status: [number | null, NodeJS.Signals | null] = sig === 0 ? [(wait >> 8) & 0xff, null] : [null, SIGNAL_NAMES.get(sig) ?? "SIGKILL"];
    this.status = status;
    setImmediate(() => {
      this.emit("exit", ...status);
      this.maybeClose();
    });
  }

  private maybeClose(): void {
    if (this.exitEmitted && this.open === 0) this.emit("close", ...this.status!);
  }
}

function errnoError(errno: number, syscall: string, path: string): NodeJS.ErrnoException {
  const code = getSystemErrorName(-errno);
  const err: NodeJS.ErrnoException = new Error(`${syscall} ${path} ${code}`);
  err.code = code;
  err.errno = -errno;
  err.syscall = syscall;
  err.path = path;
  return err;
}

function cstrings(parts: string[]): Buffer {
  for (const p of parts) {
    if (p.includes("\0")) throw new TypeError(`The argument 'args' must be a string without null bytes. Received ${JSON.stringify(p)}`);
  }
  return Buffer.from(`${parts.join("\0")}\0`);
}

function frame(type: number, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32LE(1 + body.length, 0);
  head[4] = type;
  return Buffer.concat([head, body]);
}

/** One `--spawn-helper` process and the children it started. */
export class SpawnHelper {
  readonly proc: ChildProcess;
  private buf: Buffer = Buffer.alloc(0);
  private nextId = 1;
  private readonly answers = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly children = new Map<number, HelperChild>();
  dead = false;
  /** Set when it turned out unusable after its probe succeeded. */
  broken: string | undefined;
  readonly ready: Promise<void>;

  constructor(binary: string) {
    this.proc = spawn(binary, ["--spawn-helper"], { stdio: ["pipe", "pipe", "inherit"] });
    // It never keeps envd running by itself: only while an answer is awaited (see request()).
    this.proc.unref();
    for (const s of [this.proc.stdin, this.proc.stdout] as unknown as net.Socket[]) s.unref?.();
    this.proc.stdin!.on("error", () => undefined);
    this.proc.stdout!.on("data", (chunk: Buffer) => this.onData(chunk));
    this.proc.once("exit", () => this.onDeath());
    this.proc.once("error", () => this.onDeath());
    this.ready = this.ping();
  }

  /** The helper answers, and envd can open its fds (not everywhere: some /proc refuse). */
  private async ping(): Promise<void> {
    const [fd] = await this.request<number[]>(T_PING, Buffer.alloc(0));
    if (fd === undefined || fd < 0) throw new Error("the spawn helper has no probe pipe");
    closeSync(openSync(`/proc/${this.proc.pid}/fd/${fd}`, fsc.O_RDONLY | fsc.O_NONBLOCK));
  }

  /** Sends a request; resolves with its answer (PING: the words; SPAWN: the child). */
  private request<T>(type: number, body: Buffer): Promise<T> {
    if (this.dead) return Promise.reject(new Error("the spawn helper exited"));
    const id = this.nextId++ >>> 0;
    const head = Buffer.alloc(4);
    head.writeUInt32LE(id, 0);
    return new Promise<T>((resolve, reject) => {
      this.answers.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.awaiting(true);
      const req = frame(type, Buffer.concat([head, body]));
      this.proc.stdin!.write(this.closes.length ? Buffer.concat([...this.closes, req]) : req);
      this.closes = [];
      clearTimeout(this.closeTimer);
      this.closeTimer = undefined;
    });
  }

  /**
   * CLOSE frames not sent yet. They go with the next request (one write for
   * both), or at the end of this turn when something may be waiting for
   * them: the child's stdin (its EOF needs the helper's copy closed) or a
   * spawn already sent (in the helper, a uid-changing one waits for every
   * earlier CLOSE); else within CLOSE_IDLE_MS.
   */
  private closes: Buffer[] = [];
  private closeImmediate = false;
  private closeTimer: NodeJS.Timeout | undefined;

  private closeLater(id: number, stdin: boolean): void {
    const body = Buffer.alloc(4);
    body.writeUInt32LE(id, 0);
    this.closes.push(frame(T_CLOSE, body));
    if ((stdin || this.answers.size > 0) && !this.closeImmediate) {
      this.closeImmediate = true;
      setImmediate(() => this.flushCloses());
    } else if (!this.closeTimer) {
      this.closeTimer = setTimeout(() => this.flushCloses(), CLOSE_IDLE_MS);
      this.closeTimer.unref();
    }
  }

  private flushCloses(): void {
    this.closeImmediate = false;
    clearTimeout(this.closeTimer);
    this.closeTimer = undefined;
    if (this.closes.length === 0 || this.dead) return;
    this.proc.stdin!.write(this.closes.length === 1 ? this.closes[0]! : Buffer.concat(this.closes));
    this.closes = [];
  }

  private awaiting(on: boolean): void {
    const out = this.proc.stdout as unknown as net.Socket;
    if (on) out.ref?.();
    else if (this.answers.size === 0) out.unref?.();
  }

  private take(id: number): { resolve: (v: unknown) => void; reject: (e: Error) => void } | undefined {
    const a = this.answers.get(id >>> 0);
    this.answers.delete(id >>> 0);
    this.awaiting(false);
    return a;
  }

  private onData(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= 4) {
      const len = this.buf.readUInt32LE(0);
      if (this.buf.length < 4 + len) break;
      const type = this.buf[4]!;
      const words: number[] = [];
      for (let o = 5; o + 4 <= 4 + len; o += 4) words.push(this.buf.readInt32LE(o));
      this.buf = this.buf.subarray(4 + len);
      if (type === T_EXIT) this.children.get(words[0]!)?.exited(words[1]!);
      else if (type === T_SPAWN) this.onSpawned(words);
      else if (type === T_PING) this.answer(words[0]!, words.slice(1));
    }
  }

  private answer(id: number, words: number[]): void {
    this.take(id)?.resolve(words);
  }

  /** Opens envd's ends of the child's pipes now, before an EXIT of it can be read, and registers it. */
  private onSpawned([id, pid, out, err, inp]: number[]): void {
    const a = this.take(id!);
    if (!a) {
      if (pid! >= 0) this.closeLater(id! >>> 0, true); // nobody waits for it (never expected): the helper must not wait either
      return;
    }
    if (pid! < 0) {
      a.reject(errnoError(-pid!, "spawn", ""));
      return;
    }
    const open = (fd: number, flags: number) => openSync(`/proc/${this.proc.pid}/fd/${fd}`, flags | fsc.O_NONBLOCK);
    let fds: number[] = [];
    try {
      fds = [open(out!, fsc.O_RDONLY), open(err!, fsc.O_RDONLY)];
      let stdin: net.Socket | null = null;
      if (inp! >= 0) {
        try {
          fds.push(open(inp!, fsc.O_WRONLY));
          stdin = new net.Socket({ fd: fds[2], readable: false, writable: true });
        } catch {
          // ENXIO: the child already ended and nobody reads its stdin any more.
        }
      }
      const child = new HelperChild(pid!, { stdout: new PooledPipe(fds[0]!), stderr: new PooledPipe(fds[1]!) }, stdin);
      this.children.set(pid!, child);
      child.once("exit", () => this.children.delete(pid!));
      // (an EXIT read right after this, in the same chunk, finds it here)
      a.resolve(child);
    } catch (e) {
      for (const fd of fds) closeSync(fd);
      try {
        process.kill(pid!, "SIGKILL");
      } catch {
        // already gone
      }
      // Not again: later processes are started by Node (the helper cannot be used here after all).
      this.broken = `cannot open the pipes of a process it started: ${(e as Error).message}`;
      a.reject(new Error(`cannot open the pipes of a process the spawn helper started: ${(e as Error).message}`));
    } finally {
      this.closeLater(id! >>> 0, inp! >= 0);
    }
  }

  /** The helper is gone: its requests fail; its children are watched until they end (their status is lost). */
  private onDeath(): void {
    if (this.dead) return;
    this.dead = true;
    for (const a of this.answers.values()) a.reject(new Error("the spawn helper exited"));
    this.answers.clear();
    if (this.children.size === 0) return;
    const timer = setInterval(() => {
      for (const [pid, child] of this.children) {
        try {
          process.kill(pid, 0);
        } catch {
          child.exited(osc.signals.SIGKILL);
        }
      }
      if (this.children.size === 0) clearInterval(timer);
    }, ORPHAN_POLL_MS);
    timer.unref();
  }

  async spawn(spec: HelperSpawnSpec): Promise<SpawnedChild> {
    const env = Object.entries(spec.env).filter(([, v]) => v !== undefined).map(([k, v]) => `${k}=${v}`);
    const strings = cstrings([spec.cmd, spec.cwd, spec.cmd, ...spec.args, ...env]);
    const argc = spec.args.length + 1;
    const head = Buffer.alloc(20);
    head.writeInt32LE(spec.uid ?? -1, 0);
    head.writeInt32LE(spec.gid ?? -1, 4);
    head.writeUInt32LE((spec.stdin ? F_STDIN : 0) | F_SETSID | (spec.oom ? F_OOM : 0), 8);
    head.writeUInt32LE(argc, 12);
    head.writeUInt32LE(env.length, 16);
    return this.request<HelperChild>(T_SPAWN, Buffer.concat([head, strings]));
  }
}

let helper: SpawnHelper | undefined;
let starts = 0;
let unusable: string | undefined;

/**
 * The helper to spawn with, started on first use, or undefined: none is
 * configured, or it cannot be used here (then `spawnHelperUnusable()` says why).
 */
export async function spawnHelper(): Promise<SpawnHelper | undefined> {
  if (unusable) return undefined;
  const binary = process.env.LOCALE2B_SPAWN_HELPER;
  if (!binary) return undefined;
  if (!helper || helper.dead) {
    if (starts++ >= MAX_STARTS) {
      unusable = `the spawn helper ${binary} exited ${MAX_STARTS} times`;
      return undefined;
    }
    helper = new SpawnHelper(binary);
  }
  const h = helper;
  try {
    await h.ready;
    if (h.broken) throw new Error(h.broken);
    return h;
  } catch (err) {
    unusable = `the spawn helper ${binary} cannot be used: ${(err as Error).message}`;
    // Its processes (if any) go on and are still reaped and reported by it; it just starts no more.
    if (!h.broken) h.proc.kill("SIGKILL");
    return undefined;
  }
}

export function spawnHelperUnusable(): string | undefined {
  return unusable;
}

/** Tests: forget the helper (its children run on), so that the next spawn reads LOCALE2B_SPAWN_HELPER again. */
export function resetSpawnHelper(): void {
  helper?.proc.stdin?.end();
  helper = undefined;
  starts = 0;
  unusable = undefined;
}

