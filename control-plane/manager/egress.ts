import type { Instance, Runtime } from "../runtimes/runtime.js";
import { resolveEgress } from "../runtimes/net/policy.js";
import { needsProxy } from "../runtimes/net/egress-proxy/proxies.js";
import { originalDestinationUnsupported } from "../runtimes/net/egress-proxy/original-destination.js";
import { interceptionUnsupported } from "../runtimes/net/egress-proxy/interception.js";
import type { EgressPolicy, EgressRules, SandboxNetwork } from "../domain/network.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { SandboxRecord } from "../domain/sandbox.js";

export { resolveEgress, type EgressPolicy };

/** A create's policy, refused (`invalid`) when its runtime cannot enforce one here. */
export async function egressFor(runtime: Runtime, network: SandboxNetwork | undefined, allowInternetAccess: boolean): Promise<EgressPolicy | undefined> {
  const policy = await resolveEgress(network, allowInternetAccess);
  if (!policy) return undefined;
  const why = (await runtime.egressUnsupported()) ?? (needsProxy(policy) ? await originalDestinationUnsupported() : undefined);
  if (why) throw new ControlPlaneError("invalid", `network.allowOut/denyOut cannot be enforced on this server: ${why}`);
  const noRules = policy.rules ? interceptionUnsupported() : undefined;
  if (noRules) throw new ControlPlaneError("invalid", `network.rules cannot be applied on this server: ${noRules}`);
  return policy;
}

/** The stored network config after an update, which replaces the egress lists (an omitted one is cleared). */
export function networkAfterUpdate(current: SandboxNetwork | undefined, rules: EgressRules): SandboxNetwork {
  const { allowOut: _a, denyOut: _d, rules: _r, ...rest } = current ?? {};
  return {
    ...rest,
    ...(rules.allowOut ? { allowOut: rules.allowOut } : {}),
    ...(rules.denyOut ? { denyOut: rules.denyOut } : {}),
    ...(rules.rules ? { rules: rules.rules } : {}),
  };
}

/** Applies PUT /network's rules to a sandbox's instance; `conflict` when it cannot have them. */
export async function applyNetworkUpdate(
  rec: SandboxRecord,
  inst: Instance | undefined,
  rules: EgressRules,
  allowInternetAccess: boolean,
): Promise<void> {
  if ((rec.state !== "running" && rec.state !== "paused") || !inst) throw new ControlPlaneError("conflict", `sandbox '${rec.id}' is ${rec.state}`);
  const policy = await resolveEgress(rules, allowInternetAccess);
  const why = policy && needsProxy(policy) ? await originalDestinationUnsupported() : undefined;
  if (why) throw new ControlPlaneError("invalid", `network.allowOut host names cannot be enforced on this server: ${why}`);
  await inst.updateEgress(policy).catch((err: Error) => {
    throw new ControlPlaneError("conflict", err.message);
  });
}
