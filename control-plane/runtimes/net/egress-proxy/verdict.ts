// Whether a sandbox's redirected connection may go on, by E2B's rules:
// allowOut entries win over denyOut entries; a host name in allowOut
// (`example.com`, or `*.example.com`: subdomains at any depth, not the apex)
// allows a connection whose SNI / Host is that name. A name is believed only
// when it resolves, on the resolvers the sandbox uses, to the address the
// connection really goes to; a connection that hides its name, or names a
// host that is not where it goes, is judged by the address rules alone.
import net from "node:net";
import type { EgressPolicy } from "../../../domain/network.js";

/** Whether `name` (as the client sent it) matches one of allowOut's host names. */
export function nameAllowed(names: readonly string[], name: string): boolean {
  const n = name.toLowerCase().replace(/\.$/, "");
  if (!n || net.isIP(n)) return false;
  return names.some((p) => (p.startsWith("*.") ? n.endsWith(p.slice(1)) && n.length > p.length - 1 : n === p));
}

function inCidr(address: string, cidr: string): boolean {
  const [base, bits] = cidr.split("/");
  const list = new net.BlockList();
  list.addSubnet(base!, Number(bits ?? 32), "ipv4");
  return list.check(address, "ipv4");
}

/** The address rules alone (allow wins, then deny, else open). */
export function addressAllowed(policy: EgressPolicy, address: string): boolean {
  if (policy.allow.some((c) => inCidr(address, c))) return true;
  return !policy.deny.some((c) => inCidr(address, c));
}

export type Verdict = { allow: true; by: "address" | "name"; name?: string } | { allow: false; reason: string; name?: string };

/**
 * The verdict on a connection to `address` that named `name` (undefined: it
 * named nothing). `resolves(name, address)` says whether the name's current
 * addresses include this one; it is only asked when the answer matters.
 */
export async function judge(policy: EgressPolicy, address: string, name: string | undefined, resolves: (name: string, address: string) => Promise<boolean>): Promise<Verdict> {
  const byAddress = addressAllowed(policy, address);
  if (byAddress) return { allow: true, by: "address", ...(name ? { name } : {}) };
  if (name === undefined) return { allow: false, reason: "the connection names no host (no TLS SNI or HTTP Host) and its address is not allowed" };
  if (!nameAllowed(policy.names ?? [], name)) return { allow: false, name, reason: "neither its host name nor its address is allowed" };
  if (!(await resolves(name, address))) return { allow: false, name, reason: `'${name}' does not resolve to ${address}, and that address is not allowed` };
  return { allow: true, by: "name", name };
}
