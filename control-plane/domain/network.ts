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
}

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
}

/** The egress rules of a create or of PUT /network (SandboxNetworkUpdateConfig): an omitted list is empty. */
export type EgressRules = Pick<SandboxNetwork, "allowOut" | "denyOut">;
