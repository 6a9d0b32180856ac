// E2B's `network.allowOut` / `denyOut` as a typed policy: parsed (and
// domain names resolved) where a request enters, enforced by nft rules on the
// host side of a sandbox's network device (nft.ts).
import { lookup } from "node:dns/promises";
import net from "node:net";
import { ControlPlaneError } from "../../domain/errors.js";
import type { EgressPolicy, EgressRules } from "../../domain/network.js";

const MAX_ENTRIES = 256;
const HOSTNAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;

function list(rules: EgressRules, key: "allowOut" | "denyOut"): string[] {
  const v = rules[key] ?? [];
  if (v.length > MAX_ENTRIES) throw new ControlPlaneError("invalid", `network.${key} has ${v.length} entries; at most ${MAX_ENTRIES} are allowed`);
  return v.map((e) => e.trim());
}

/**
 * `a.b.c.d` or `a.b.c.d/n` as a normalised IPv4 CIDR; "v6" for an IPv6 one
 * (a sandbox with an egress policy has no IPv6 route at all); undefined when
 * it is no address.
 */
function cidr(entry: string, key: string): string | "v6" | undefined {
  const [addr, bits, ...rest] = entry.split("/");
  const family = net.isIP(addr ?? "");
  if (family === 0 || rest.length) return undefined;
  if (family === 6) {
    if (bits !== undefined && !(/^\d{1,3}$/.test(bits) && Number(bits) <= 128)) {
      throw new ControlPlaneError("invalid", `network.${key}: '${entry}' has an invalid prefix length (0 to 128)`);
    }
    return "v6";
  }
  if (bits === undefined) return `${addr}/32`;
  if (!/^\d{1,2}$/.test(bits) || Number(bits) > 32) throw new ControlPlaneError("invalid", `network.${key}: '${entry}' has an invalid prefix length (0 to 32)`);
  return `${addr}/${Number(bits)}`;
}

/**
 * The policy a create asks for, with domain names in allowOut resolved to
 * their IPv4 addresses now (the sandbox may reach those addresses); undefined
 * when it asks for none. Bad entries are `invalid` errors that say which.
 */
export async function resolveEgress(rules: EgressRules | undefined, allowInternetAccess: boolean): Promise<EgressPolicy | undefined> {
  if (!rules) return undefined;
  const allowOut = list(rules, "allowOut");
  const denyOut = list(rules, "denyOut");
  if (!allowOut.length && !denyOut.length) return undefined;
  const deny: string[] = [];
  for (const e of denyOut) {
    const c = cidr(e, "denyOut");
    if (!c) throw new ControlPlaneError("invalid", `network.denyOut: '${e}' is not an IP address or CIDR block (domain names are not supported in deny rules)`);
    if (c !== "v6") deny.push(c); // IPv6 is denied anyway: the sandbox has no IPv6 route
  }
  const allow: string[] = [];
  for (const e of allowOut) {
    const c = cidr(e, "allowOut");
    if (c === "v6") {
      throw new ControlPlaneError("invalid", `network.allowOut: '${e}' is IPv6; a sandbox with an egress policy has IPv4 only on this server`);
    }
    if (c) {
      allow.push(c);
      continue;
    }
    if (e.startsWith("*.")) {
      throw new ControlPlaneError("invalid", `network.allowOut: '${e}': wildcard domains are not supported by this server; list each host name`);
    }
    if (!HOSTNAME.test(e)) throw new ControlPlaneError("invalid", `network.allowOut: '${e}' is not a CIDR block, an IP address or a domain name`);
    const addrs = await lookup(e, { all: true, family: 4 }).catch((err: NodeJS.ErrnoException) => {
      throw new ControlPlaneError("invalid", `network.allowOut: cannot resolve '${e}' (${err.code ?? err.message})`);
    });
    for (const a of addrs) allow.push(`${a.address}/32`);
  }
  if (!allowInternetAccess) deny.push("0.0.0.0/0");
  return { allow: [...new Set(allow)], deny: [...new Set(deny)] };
}
