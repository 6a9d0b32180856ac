// E2B's `network` objects as they enter: SandboxNetworkConfig (a create) and
// SandboxNetworkUpdateConfig (PUT /sandboxes/{id}/network), checked field by
// field into the typed config the manager and the runtimes use. Entries are
// only checked for type here; what an entry means (CIDR, domain) is the
// egress policy's business (runtimes/net/policy.ts).
import type { EgressRules, SandboxNetwork } from "../../domain/network.js";
import { maskRequestHostProblem } from "../proxy/mask-host.js";
import { describe, Fields } from "./body.js";
import { HttpError } from "./errors.js";
import { parseNetworkRules } from "./network-rules-body.js";

function stringList(body: Record<string, unknown>, name: "allowOut" | "denyOut"): string[] | undefined {
  const list = new Fields(body).array(name);
  list?.forEach((e, i) => {
    if (typeof e !== "string") throw new HttpError(400, `field 'network.${name}[${i}]' must be a string (a CIDR block, an IP address${name === "allowOut" ? " or a domain name" : ""}), got ${describe(e)}`);
  });
  return list as string[] | undefined;
}

/** What this server does not do: an upstream (SOCKS5) egress proxy. */
function refuseUnsupported(body: Record<string, unknown>): void {
  const f = new Fields(body);
  if (f.object("egressProxy")) throw new HttpError(400, "field 'network.egressProxy': egress proxies are not supported by this server");
}

function egressRules(body: Record<string, unknown>): EgressRules {
  const allowOut = stringList(body, "allowOut");
  const denyOut = stringList(body, "denyOut");
  const rules = parseNetworkRules(body.rules);
  return { ...(allowOut ? { allowOut } : {}), ...(denyOut ? { denyOut } : {}), ...(rules && Object.keys(rules).length ? { rules } : {}) };
}

/** A create's `network` (SandboxNetworkConfig); `secure` says the sandbox has a traffic token to require. */
export function parseNetworkConfig(body: Record<string, unknown>, secure: boolean): SandboxNetwork {
  refuseUnsupported(body);
  const f = new Fields(body);
  const allowPublicTraffic = f.bool("allowPublicTraffic");
  if (allowPublicTraffic === false && !secure) throw new HttpError(400, "network.allowPublicTraffic: false needs a secured sandbox (secure: true)");
  const mask = body.maskRequestHost ?? undefined;
  const maskProblem = maskRequestHostProblem(mask);
  if (maskProblem) throw new HttpError(400, maskProblem);
  return {
    ...(allowPublicTraffic !== undefined ? { allowPublicTraffic } : {}),
    ...egressRules(body),
    ...(typeof mask === "string" && mask !== "" ? { maskRequestHost: mask } : {}),
  };
}

/** PUT /network's body: the rules that replace the sandbox's (an omitted list clears it) and whether the internet stays open. */
export function parseNetworkUpdate(body: Record<string, unknown>): { rules: EgressRules; allowInternetAccess: boolean } {
  refuseUnsupported(body);
  return { rules: egressRules(body), allowInternetAccess: new Fields(body).bool("allow_internet_access") ?? true };
}
