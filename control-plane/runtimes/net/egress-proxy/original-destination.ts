// Where a redirected connection was going. The sandbox's TCP is DNATed to its
// own proxy listener (proxy-rules.ts), so the accepted socket's local address
// is the listener's; the original destination is in the kernel's connection
// tracking entry, keyed by the sandbox's address and source port (unique while
// the connection lives). Node has no SO_ORIGINAL_DST (getsockopt) and no
// IP_TRANSPARENT for a TPROXY listener, and a native addon would need a
// compiler on every host; conntrack's own table is the one sound source left:
// read from /proc/net/nf_conntrack where the kernel has it, else from the
// `conntrack` tool (netlink). Lookups that arrive together share one read.
import { readFile } from "node:fs/promises";
import { runCommand } from "../../../host/commands.js";
import { findExecutable } from "../../../host/executables.js";

export interface Destination {
  address: string;
  port: number;
}

const PROC = "/proc/net/nf_conntrack";

/** Why this host cannot tell a redirected connection's destination, or undefined when it can. */
export async function originalDestinationUnsupported(): Promise<string | undefined> {
  if (await readFile(PROC).then(() => true, () => false)) return undefined;
  if (findExecutable("conntrack")) return undefined;
  return `the host has neither ${PROC} nor the conntrack tool (install conntrack) to find a proxied connection's destination`;
}

let pending: Promise<string> | undefined;

/** The conntrack table as text (one read for the lookups waiting on it). */
function table(): Promise<string> {
  pending ??= (async () => {
    try {
      return await readFile(PROC, "latin1");
    } catch {
      const bin = findExecutable("conntrack");
      if (!bin) throw new Error(`cannot read ${PROC} and there is no conntrack tool`);
      return (await runCommand(bin, ["-L", "-p", "tcp"])).stdout;
    }
  })().finally(() => {
    pending = undefined;
  });
  return pending;
}

/**
 * The destination the connection from `source`:`sourcePort` asked for before
 * it was DNATed to `listener`:`listenerPort`; undefined when no such entry is
 * there (the connection is gone).
 */
export async function originalDestination(source: string, sourcePort: number, listener: string, listenerPort: number): Promise<Destination | undefined> {
  const text = await table();
  const orig = ` src=${source} dst=`;
  const reply = ` src=${listener} dst=${source} sport=${listenerPort} dport=${sourcePort} `;
  let at = 0;
  for (;;) {
    at = text.indexOf(reply, at);
    if (at < 0) return undefined;
    const lineStart = text.lastIndexOf("\n", at) + 1;
    const line = text.slice(lineStart, at + reply.length);
    at += reply.length;
    const m = new RegExp(`${orig.replace(/\./g, "\\.")}(\\d+\\.\\d+\\.\\d+\\.\\d+) sport=${sourcePort} dport=(\\d+) `).exec(line);
    if (m && /\btcp\b/.test(line)) return { address: m[1]!, port: Number(m[2]) };
  }
}
