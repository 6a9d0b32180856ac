import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Instance, Runtime } from "../runtimes/runtime.js";
import { newSandboxId } from "./ids.js";

/** What a warm sandbox was started with: a create must ask for exactly this to get one. */
export interface WarmShape {
  templateId: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
}

export interface WarmSandbox {
  id: string;
  dir: string;
  runtime: Runtime;
  inst: Instance;
}

export interface WarmPoolOptions {
  /** How many ready sandboxes to keep (0: none). */
  size: number;
  shape: WarmShape;
  runtime: () => Promise<Runtime>;
  dir: (id: string) => string;
  /** Runs a start in one of the host's start slots, behind any waiting create (default: at once). */
  admit?: <T>(start: () => Promise<T>) => Promise<T>;
  /** Waits until the instance's envd answers (the manager's readiness check). */
  waitReady: (id: string, inst: Instance) => Promise<void>;
  log: Logger;
}

/** Written into a warm sandbox's dir: a server that dies leaves these to be cleaned at its next start. */
const MARKER = "warm.json";
/** How long a refill's start may run at the lowest CPU priority before it gets the normal one. */
const BACKGROUND_MAX_MS = 1_000;
/**
 * How long after a take that left ready sandboxes the replacement starts: its
 * start (the runtime's set-up in this process, then a Node start) would
 * otherwise run while the claimed sandbox gets its settings and its first
 * command. On a 2-core host, with the pool full before the create, create ->
 * first output p50 went from 28-30 ms to 19-20 with this delay.
 */
const REFILL_AFTER_TAKE_MS = 100;
/** After a failed start, wait this long before trying again (no tight loop on a broken host). */
const RETRY_MS = 30_000;

/**
 * Sandboxes started ahead of time, envd up, not yet anyone's: a create that
 * asks for the pool's shape (the default template, vCPUs and memory, with
 * internet access) takes one and only pushes its settings through /init, so
 * it skips the runtime's start-up (envd's Node start for the process
 * runtime, a whole boot for a VM). The pool refills in the background, one
 * sandbox at a time, starting shortly after a take and at the lowest CPU
 * priority the runtime can give for its first second: the sandbox just
 * handed out runs its first commands first. Warm sandboxes are not in the
 * store: the server kills them when it stops, and the next start removes
 * any a crash left behind.
 */
export class WarmPool {
  private readonly ready: WarmSandbox[] = [];
  private starting = 0;
  /** The start in progress, if any: close() waits for it (and discards what it made). */
  private inflight: Promise<void> | undefined;
  private closed = false;
  private retryAt = 0;

  constructor(private readonly o: WarmPoolOptions) {}

  get size(): number {
    return this.ready.length;
  }

  /** What the pool holds and wants: its sandboxes ready, starting, and how many it keeps (capacity page). */
  get state(): { ready: number; starting: number; target: number } {
    return { ready: this.ready.length, starting: this.starting, target: this.o.size };
  }

  matches(shape: WarmShape, allowInternetAccess: boolean): boolean {
    const s = this.o.shape;
    return (
      allowInternetAccess &&
      shape.templateId === s.templateId &&
      shape.cpuCount === s.cpuCount &&
      shape.memoryMB === s.memoryMB &&
      shape.diskSizeMB === s.diskSizeMB
    );
  }

  /**
   * A ready sandbox, or undefined. The pool starts a replacement at once when
   * it is now empty (the next create would miss it), else REFILL_AFTER_TAKE_MS
   * later.
   */
  take(): WarmSandbox | undefined {
    const warm = this.ready.shift();
    if (warm) rmSync(join(warm.dir, MARKER), { force: true });
    if (this.ready.length === 0) this.fill();
    else setTimeout(() => this.fill(), REFILL_AFTER_TAKE_MS).unref();
    return warm;
  }

  /** Starts sandboxes until the pool is full (one at a time: they share the host with real work). */
  fill(): void {
    if (this.closed || this.starting > 0 || this.ready.length >= this.o.size || Date.now() < this.retryAt) return;
    this.starting++;
    const admit = this.o.admit ?? ((start) => start());
    this.inflight = admit(() => this.startOne())
      .then((warm) => {
        if (this.closed) return this.discard(warm);
        this.ready.push(warm);
      })
      .catch((err: unknown) => {
        this.retryAt = Date.now() + RETRY_MS;
        this.o.log.warn({ err }, `could not start a warm sandbox; trying again in ${RETRY_MS / 1000} s`);
      })
      .finally(() => {
        this.starting--;
        this.inflight = undefined;
        this.fill();
      });
  }

  private async startOne(): Promise<WarmSandbox> {
    const runtime = await this.o.runtime();
    const id = newSandboxId();
    const dir = this.o.dir(id);
    const log = this.o.log.child({ sandboxId: id, warm: true });
    let inst: Instance | undefined;
    try {
      mkdirSync(dir, { recursive: true });
      // Marked before the start: a server that dies during it leaves a dir the next start cleans up.
      writeFileSync(join(dir, MARKER), JSON.stringify({ runtime: runtime.name }));
      inst = await runtime.create({ sandboxId: id, ...this.o.shape, dir, allowInternetAccess: true, background: true, log });
      writeFileSync(join(dir, MARKER), JSON.stringify({ runtime: runtime.name, persisted: inst.persisted }));
      // Started in the background (it yields the CPU to real work), but on a host that stays busy it
      // must still get ready: past BACKGROUND_MAX_MS it starts at the normal priority.
      const started = inst;
      const lift = setTimeout(() => started.foreground?.(), BACKGROUND_MAX_MS);
      await this.o.waitReady(id, inst).finally(() => clearTimeout(lift));
    } catch (err) {
      await inst?.kill().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    const warm = { id, dir, runtime, inst };
    inst.onExit((reason) => {
      const i = this.ready.indexOf(warm);
      if (i < 0) return; // taken: its owner watches it now
      this.ready.splice(i, 1);
      log.warn({ reason }, "a warm sandbox died");
      void this.discard(warm).finally(() => this.fill());
    });
    log.debug("warm sandbox ready");
    return warm;
  }

  /** Kills a sandbox that is not handed out (or a taken one whose hand-over failed). */
  async discard(warm: WarmSandbox): Promise<void> {
    await warm.inst.kill().catch(() => undefined);
    rmSync(warm.dir, { recursive: true, force: true });
  }

  /** Kills every warm sandbox (server shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    await this.inflight;
    await Promise.all(this.ready.splice(0).map((w) => this.discard(w)));
  }
}

/**
 * Kills warm sandboxes a previous server left behind (it died before it
 * could): every sandbox dir with a marker and no store record.
 */
export async function removeLeftoverWarm(
  sandboxesDir: string,
  known: (id: string) => boolean,
  runtimeByName: (name: string) => Promise<Runtime>,
  log: Logger,
): Promise<void> {
  let ids: string[];
  try {
    ids = readdirSync(sandboxesDir);
  } catch {
    return;
  }
  for (const id of ids) {
    const dir = join(sandboxesDir, id);
    let marker: { runtime?: string; persisted?: Record<string, unknown> };
    try {
      marker = JSON.parse(readFileSync(join(dir, MARKER), "utf8"));
    } catch {
      continue;
    }
    if (known(id)) continue;
    try {
      const runtime = await runtimeByName(String(marker.runtime));
      const inst = await runtime.adopt(id, dir, marker.persisted ?? {}, log.child({ sandboxId: id }));
      await inst?.kill();
    } catch (err) {
      log.warn({ err, sandboxId: id }, "cannot stop a leftover warm sandbox");
    }
    rmSync(dir, { recursive: true, force: true });
  }
}
