// E2B's `network.allowOut` / `denyOut` as a typed policy: parsed where a
// request enters; addresses are enforced by nft rules on the host side of a
// sandbox's network device (nft.ts), host names (`example.com`,
// `*.example.com`) by the egress proxy on the TLS SNI / HTTP Host of each
// connection (egress-proxy/).
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
 * A host name of allowOut, lowercased without a trailing dot: `example.com`
 * or `*.example.com` (E2B's form: one leading wildcard label, matching
 * subdomains at any depth but not the apex; a bare `*` is invalid).
 */
function hostPattern(entry: string): string {
  const e = entry.toLowerCase().replace(/\.$/, "");
  const rest = e.startsWith("*.") ? e.slice(2) : e;
  if (e === "*" || (e.startsWith("*") && !e.startsWith("*."))) {
    throw new ControlPlaneError("invalid", `network.allowOut: '${entry}': a wildcard is one leading label, as in '*.example.com' (a bare '*' is not allowed: use '0.0.0.0/0')`);
  }
  if (!HOSTNAME.test(rest) || rest.includes("*") || /^\d+(\.\d+)*$/.test(rest)) {
    throw new ControlPlaneError("invalid", `network.allowOut: '${entry}' is not a CIDR block, an IP address or a domain name`);
  }
  return e;
}

/**
 * The policy a create asks for (host names kept as names: the egress proxy
 * judges them per connection, so a name's addresses may change after
 * create) and its per-host request rules; undefined when it asks for none. Bad entries are `invalid` errors
 * that say which.
 */
export async function resolveEgress(rules: EgressRules | undefined, allowInternetAccess: boolean): Promise<EgressPolicy | undefined> {
  if (!rules) return undefined;
  const allowOut = list(rules, "allowOut");
  const denyOut = list(rules, "denyOut");
  const transforms = rules.rules && Object.keys(rules.rules).length ? rules.rules : undefined;
  if (!allowOut.length && !denyOut.length && !transforms) return undefined;
  const deny: string[] = [];
  for (const e of denyOut) {
    const c = cidr(e, "denyOut");
    if (!c) throw new ControlPlaneError("invalid", `network.denyOut: '${e}' is not an IP address or CIDR block (domain names are not supported in deny rules)`);
    if (c !== "v6") deny.push(c); // IPv6 is denied anyway: the sandbox has no IPv6 route
  }
  const allow: string[] = [];
  const names: string[] = [];
  for (const e of allowOut) {
    const c = cidr(e, "allowOut");
    if (c === "v6") {
      throw new ControlPlaneError("invalid", `network.allowOut: '${e}' is IPv6; a sandbox with an egress policy has IPv4 only on this server`);
    }
    if (c) {
      allow.push(c);
      continue;
    }
    names.push(hostPattern(e));
  }
  if (!allowInternetAccess) deny.push("0.0.0.0/0");
  return {
    allow: [...new Set(allow)],
    deny: [...new Set(deny)],
    ...(names.length ? { names: [...new Set(names)] } : {}),
    ...(transforms ? { rules: transforms } : {}),
  };
}
