// envd's host listener in a gVisor sandbox: the init listens on a Unix socket
// in a host directory the sandbox shares (runsc's host-socket support), the
// control plane dials it there. That directory is the sandbox's to write, so
// the socket is claimed (renamed out of reach) before it is ever dialed. runsc
// cannot checkpoint a sandbox holding a host socket: before a checkpoint the
// init closes its listener and connections (quiesce), after a restore it
// listens again (relisten), each asked for with a signal.
import { renameSync, rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import { accepts } from "../../host/unix-socket.js";
import { lstatOrUndefined, socketAt } from "./host-ops.js";
import { quiescedAck, type GvisorLayout } from "./rootfs.js";
import type { Runsc } from "./runsc.js";

/** Signals the init (rootfs/init) takes in process mode: close the host listener and connections, and listen again. */
const SIG_QUIESCE = "URG";
const SIG_RELISTEN = "WINCH";
/** How long the init may take to quiesce, and envd's socket to come back after a restore. */
const QUIESCE_MS = 5_000;
const RELISTEN_MS = 15_000;

/**
 * True once envd's socket is where the control plane dials it. The init
 * creates it in the host directory the sandbox shares, where root in the
 * sandbox could swap it for a symlink to any Unix socket on the host, and
 * the control plane's dials would follow it. So the socket is renamed out
 * of that directory (a listening socket keeps working under a new name)
 * as soon as it is there, and only a real socket is: anything else there
 * (a symlink, a file) is never dialed, and the create times out saying so.
 */
export function claimDialSocket(layout: GvisorLayout, log: Logger, sandboxId: string): boolean {
  if (socketAt(layout.dialSocket)) return true;
  if (!socketAt(layout.socket)) {
    if (lstatOrUndefined(layout.socket)) {
      log.warn({ sandboxId }, "envd's socket in the sandbox's shared host directory is not a socket (tampered with from inside?): not dialing it");
    }
    return false;
  }
  try {
    renameSync(layout.socket, layout.dialSocket);
  } catch {
    return false;
  }
  // rename() moves whatever is there at that moment: check what arrived.
  if (socketAt(layout.dialSocket)) return true;
  rmSync(layout.dialSocket, { force: true });
  return false;
}

/** Asks the init to close its host listener and connections, and waits until it has (its ack file, and no listener). */
export async function quiesceListener(runsc: Runsc, layout: GvisorLayout): Promise<void> {
  const ack = quiescedAck(layout);
  rmSync(ack, { force: true });
  await runsc.signal(SIG_QUIESCE);
  const deadline = Date.now() + QUIESCE_MS;
  while (Date.now() < deadline) {
    if (lstatOrUndefined(ack)?.isFile()) return;
    await sleep(10);
  }
  throw new Error(`the sandbox's init did not close its host connections within ${QUIESCE_MS} ms (a template built before pause-to-disk support? rebuild it)`);
}

/**
 * Asks the init to listen again (after a restore, or a failed checkpoint),
 * and waits until its socket is where the control plane dials it
 * (`ready`: claimDialSocket, with whatever the instance does on each look).
 */
export async function relistenListener(runsc: Runsc, layout: GvisorLayout, ready: () => boolean): Promise<void> {
  const deadline = Date.now() + RELISTEN_MS;
  let asked = 0;
  while (Date.now() < deadline) {
    // Asked again every 2 s: a restored sandbox's mounts may not be back at the first ask.
    if (Date.now() - asked > 2_000) {
      rmSync(layout.dialSocket, { force: true }); // the closed listener's socket: the init makes a new one
      await runsc.signal(SIG_RELISTEN);
      asked = Date.now();
    }
    if (ready()) {
      if (await accepts(layout.dialSocket)) return;
      rmSync(layout.dialSocket, { force: true }); // a socket nobody listens on: wait for the next one
    }
    await sleep(20);
  }
  throw new Error(`envd's socket did not come back within ${RELISTEN_MS} ms`);
}
