// Forking is synchronous and, on a busy host, slow (envd's whole address
// space is copied for each child). Three hundred Start requests spawned in the
// callbacks that read them would hold envd's event loop for seconds: no new
// connection is accepted, no handshake answered and no output forwarded until
// every fork is done, and clients time out on a sandbox that is alive. So
// spawns take turns: one fork per turn of the event loop, and between two
// forks envd serves whatever I/O is waiting (handshakes, new requests, the
// response headers of queued Starts, output of running processes).

const waiting: (() => void)[] = [];
let scheduled = false;

function next(): void {
  scheduled = false;
  const go = waiting.shift();
  if (!go) return;
  // The fork runs in this turn's microtasks; the next one waits for the next turn.
  go();
  if (waiting.length) schedule();
}

function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  setImmediate(next);
}

/** Resolves when it is the caller's turn to fork (in arrival order, one per event-loop turn). */
export function spawnTurn(): Promise<void> {
  return new Promise((resolve) => {
    waiting.push(resolve);
    schedule();
  });
}

/** Spawns waiting for their turn (envd's /metrics). */
export function spawnsWaiting(): number {
  return waiting.length;
}
