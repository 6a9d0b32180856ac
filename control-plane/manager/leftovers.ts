// What a server start finds on disk of sandboxes that are no more.
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Runtime } from "../runtimes/runtime.js";
import type { Store } from "../store/store.js";
import { LIVE_STATES } from "../domain/sandbox.js";
import { removeStalePolicies } from "../runtimes/net/nft.js";
import { isPausedToDisk } from "./fs-pause.js";
import { removeLeftoverWarm } from "./warm-pool.js";

/**
 * Everything a start clears of sandboxes that are no more (after the live
 * ones are re-adopted): old dead records, the runtime's own leftovers on the
 * host (the process runtime's empty cgroups), the nft rules of host devices
 * that are gone, warm sandboxes a dead server left (killed), and the
 * directories of dead sandboxes and of pauses to disk no record owns.
 */
export async function removeLeftovers(o: {
  store: Store;
  node?: string;
  dataDir: string;
  runtime: Runtime;
  runtimeByName: (name: string) => Promise<Runtime>;
  log: Logger;
}): Promise<void> {
  const { store, dataDir, log } = o;
  const onNode = o.node !== undefined ? { node: o.node } : {};
  await pruneDeadRecords(store, onNode);
  await o.runtime.removeLeftovers?.(log).catch((err: unknown) => log.warn({ err }, "cannot remove what gone sandboxes left on the host"));
  await removeStalePolicies(log).catch((err: unknown) => log.warn({ err }, "cannot remove the network rules of gone sandboxes"));
  // This host's records, dead ones too, as they are now (the warm leftovers below are killed before the directories go).
  const records = new Map((await store.listSandboxes({ states: [...LIVE_STATES, "killed"], ...onNode })).map((r) => [r.id, r]));
  await removeLeftoverWarm(join(dataDir, "sandboxes"), (id) => records.has(id), o.runtimeByName, log);
  removeDeadSandboxDirs(join(dataDir, "sandboxes"), (id) => (records.get(id)?.state ?? "killed") !== "killed", log);
  removeDeadSandboxDirs(join(dataDir, "paused"), (id) => isPausedToDisk(records.get(id)), log);
}

/** How long the record of a dead sandbox is kept (GET answers "killed" meanwhile). */
const DEAD_RETENTION_MS = 24 * 3600_000;

/** Forgets the records of sandboxes dead for longer than DEAD_RETENTION_MS. */
export async function pruneDeadRecords(store: Store, filter: { node?: string } = {}): Promise<void> {
  for (const rec of await store.listSandboxes({ states: ["killed"], ...filter })) {
    if (rec.endAt < Date.now() - DEAD_RETENTION_MS) await store.deleteSandbox(rec.id);
  }
}

/**
 * Removes the directories under `root` of sandboxes that are not live (they
 * died, or were killed, while no server ran): a dead sandbox leaves nothing.
 */
export function removeDeadSandboxDirs(root: string, isLive: (id: string) => boolean, log: Logger): void {
  let ids: string[] = [];
  try {
    ids = readdirSync(root);
  } catch {
    return;
  }
  for (const id of ids) {
    if (isLive(id)) continue;
    rmSync(join(root, id), { recursive: true, force: true });
    log.info({ sandboxId: id }, "removed the directory of a sandbox that is gone");
  }
}
