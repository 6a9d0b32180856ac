// Connections a sandbox's egress proxy let out, for the network.request
// events (events/network-watch.ts). The kernel's NEW event of a redirected
// flow is the sandbox's connection to its proxy, made before the proxy has
// read the name and judged it: only the proxy knows whether it went out.
export interface LetOut {
  sandboxId: string;
  /** The connection's original destination. */
  destination: string;
  port: number;
}

const listeners = new Set<(c: LetOut) => void>();

/** Calls `listener` for every connection a proxy lets out from now on; returns the way to stop. */
export function onLetOut(listener: (c: LetOut) => void): () => void {
  listeners.add(listener);
  return () => void listeners.delete(listener);
}

export function reportLetOut(c: LetOut): void {
  for (const l of listeners) l(c);
}
