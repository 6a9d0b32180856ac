// Re-adopting a sandbox after a control-plane restart: its runtime finds the
// instance that outlived the server (or says it is gone), and a transition
// the restart cut short is finished; a sandbox paused to disk has no
// instance to find, only its kept files.
import { existsSync } from "node:fs";
import type { Logger } from "pino";
import type { Instance, Runtime } from "../runtimes/runtime.js";
import type { RuntimeSet } from "../runtimes/runtime-set.js";
import { isPausedToDisk, pausedDir } from "./fs-pause.js";
import type { SandboxRecord } from "../domain/sandbox.js";
import type { Endpoint } from "../transport/endpoint.js";

export interface AdoptContext {
  runtimes: RuntimeSet;
  /** The server's default runtime (records from before runtimes were recorded). */
  runtime: Runtime;
  dataDir: string;
  /** The instance's endpoint (its pause policy acts on a sandbox found paused). */
  endpoint(id: string, inst: Instance): Endpoint;
  log: Logger;
  dir(id: string): string;
  track(id: string, inst: Instance, runtime: string): void;
  markDead(rec: SandboxRecord, reason: string): void;
  save(rec: SandboxRecord): SandboxRecord;
}

export async function adoptRecord(c: AdoptContext, rec: SandboxRecord): Promise<void> {
  const log = c.log.child({ sandboxId: rec.id });
  if (isPausedToDisk(rec)) {
    // No instance runs: its files wait under paused/ (a resume cut short by the restart starts again).
    if (existsSync(pausedDir(c.dataDir, rec.id))) return void c.save({ ...rec, state: "paused" });
    return c.markDead(rec, "its paused files are gone");
  }
  const runtime = await c.runtimes.byName(rec.runtime || c.runtime.name).catch((err: unknown) => {
    log.warn({ err, runtime: rec.runtime }, "the sandbox's runtime cannot start here");
    return undefined;
  });
  const inst = await runtime?.adopt(rec.id, c.dir(rec.id), rec.runtimeData, log).catch((err: unknown) => {
    log.warn({ err }, "re-adopting sandbox failed");
    return undefined;
  });
  if (!inst) {
    c.markDead(rec, "died while the control plane was down");
    return;
  }
  c.track(rec.id, inst, runtime!.name);
  if (rec.state === "creating") {
    await inst.kill();
    c.markDead(rec, "creation interrupted by a control-plane restart");
    return;
  }
  if (rec.state === "pausing") await inst.pause();
  if (rec.state === "resuming") await inst.resume();
  const state = rec.state === "pausing" || rec.state === "paused" ? "paused" : "running";
  if (state === "paused") c.endpoint(rec.id, inst).adoptedPaused();
  c.save({ ...rec, state });
  log.info({ state }, "sandbox re-adopted");
}
