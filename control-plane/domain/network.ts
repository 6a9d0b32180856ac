// A sandbox's network as the API accepts it and the runtimes enforce it.

/**
 * A sandbox's egress policy (E2B's `network.allowOut` / `denyOut`), as IPv4
 * CIDRs: a destination in `allow` is reachable whatever `deny` says ("allowed
 * entries always take precedence"), one in `deny` is refused, anything else
 * is reachable. `allowInternetAccess: false` with an allow list means "deny
 * everything else".
 */
export interface EgressPolicy {
  allow: string[];
  deny: string[];
  /**
   * Host names from allowOut, lowercased: `example.com` (that name only) or
   * `*.example.com` (its subdomains at any depth, not the apex). Judged by the
   * egress proxy (runtimes/net/egress-proxy/) on the TLS SNI or HTTP Host of
   * each TCP connection; absent or empty when allowOut names none.
   */
  names?: string[];
  /**
   * E2B's `network.rules`, keys lowercased: requests to a matching host are
   * intercepted by the egress proxy and transformed (egress-proxy/transforms.ts).
   * Absent or empty when there are none.
   */
  rules?: NetworkRules;
}

/** What E2B's SandboxNetworkTransform does to a matching request: headers set (an existing one of the same name replaced). */
export interface NetworkTransform {
  headers?: Record<string, string>;
}

/** E2B's SandboxNetworkRule. */
export interface NetworkRule {
  transform?: NetworkTransform;
}

/**
 * E2B's `network.rules`: host (`api.example.com`, or `*.example.com`: its
 * subdomains at any depth) → the rules applied, in order, to its requests.
 * Header values may hold `${e2b.secrets.<name>}`, resolved by the egress proxy.
 */
export type NetworkRules = Record<string, NetworkRule[]>;

/**
 * E2B's `network` object (SandboxNetworkConfig) as the API accepted it, its
 * fields' types checked where the request entered (api/rest/network-body.ts):
 * what a sandbox's record keeps and getInfo returns.
 */
export interface SandboxNetwork {
  allowPublicTraffic?: boolean;
  allowOut?: string[];
  denyOut?: string[];
  /** Non-empty, a valid host (api/proxy/mask-host.ts). */
  maskRequestHost?: string;
  /** Per-host request transforms (api/rest/network-rules-body.ts checked them). */
  rules?: NetworkRules;
}

/** The egress rules of a create or of PUT /network (SandboxNetworkUpdateConfig): an omitted list is empty. */
export type EgressRules = Pick<SandboxNetwork, "allowOut" | "denyOut" | "rules">;
