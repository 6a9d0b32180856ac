// E2B's `network.rules` applied to one request: which host's rules match a
// name (an exact key first, then the longest matching `*.` suffix; rule sets
// are not merged), and the request's headers after them (each rule's headers
// set in order, an existing header of the same name, in any case, replaced).
// A value's `${e2b.secrets.<name>}` is resolved here, per request, to the
// secret's current version, by the resolver the server gives (secrets/
// placeholders.ts): only placeholders in the sandbox's own rules are ever
// resolved, never one the request itself carries.
import { ControlPlaneError } from "../../../domain/errors.js";
import type { NetworkRule, NetworkRules } from "../../../domain/network.js";

/** Resolves the placeholders in a rule's header value for a sandbox; throws (message safe to show the sandbox) when it cannot. */
export type SecretResolver = (value: string, sandboxId: string) => Promise<string>;

let resolver: SecretResolver | undefined;

/** The server's resolver (none: a rule's placeholder refuses its request). */
export function setSecretResolver(r: SecretResolver | undefined): void {
  resolver = r;
}

/** The rules for requests to `name`, or undefined when none match. */
export function rulesFor(rules: NetworkRules | undefined, name: string | undefined): NetworkRule[] | undefined {
  if (!rules || !name) return undefined;
  const n = name.toLowerCase().replace(/\.$/, "");
  if (Object.hasOwn(rules, n)) return rules[n];
  let best: string | undefined;
  for (const key of Object.keys(rules)) {
    if (!key.startsWith("*.")) continue;
    const suffix = key.slice(1); // ".example.com"
    if (n.endsWith(suffix) && n.length > suffix.length && (!best || key.length > best.length)) best = key;
  }
  return best ? rules[best] : undefined;
}

/** Whether any rule would change a request (a host whose rules set nothing is passed through untouched). */
export function rulesChangeRequests(rules: NetworkRule[] | undefined): boolean {
  return !!rules?.some((r) => Object.keys(r.transform?.headers ?? {}).length > 0);
}

const PLACEHOLDER_OPEN = "${e2b.secrets.";

/** A request that cannot be sent as its rules say (an unknown secret, say): answered 502 with `message`. */
export class TransformError extends Error {}

/**
 * `rawHeaders` (Node's flat [name, value, …] list) with the rules applied;
 * placeholders resolved for `sandboxId`.
 */
export async function transformHeaders(rawHeaders: string[], rules: NetworkRule[], sandboxId: string): Promise<string[]> {
  const set = new Map<string, [string, string]>();
  for (const r of rules) {
    for (const [name, value] of Object.entries(r.transform?.headers ?? {})) set.set(name.toLowerCase(), [name, value]);
  }
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (!set.has(rawHeaders[i]!.toLowerCase())) out.push(rawHeaders[i]!, rawHeaders[i + 1]!);
  }
  for (const [name, value] of set.values()) out.push(name, await resolveValue(value, sandboxId));
  return out;
}

async function resolveValue(value: string, sandboxId: string): Promise<string> {
  if (!value.includes(PLACEHOLDER_OPEN)) return value;
  if (!resolver) throw new TransformError("this server resolves no secrets (its secrets store is not available to the egress proxy)");
  try {
    return await resolver(value, sandboxId);
  } catch (err) {
    // What the sandbox may hear: a placeholder it wrote wrong, a secret that does not exist. Anything else (the
    // store or its key failing) stays in the server's log: its text may name host paths.
    const mine = err instanceof ControlPlaneError && (err.kind === "invalid" || err.kind === "not_found");
    throw new TransformError(mine ? err.message : "the server could not read its secrets (its log says why)", { cause: err });
  }
}
