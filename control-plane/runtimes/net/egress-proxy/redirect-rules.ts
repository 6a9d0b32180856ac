// The nft side of the egress proxy, in the shared table (nft.ts):
//
//   map proxied            ifname → jump px_<id>   (sandboxes whose policy has host names)
//   chain proxy_prerouting nat prerouting: iifname vmap @proxied
//   input (first rule)     a DNATed connection to LISTENER_PORT on a sandbox /30's host address
//                          is accepted (only px_<id> DNATs from a sandbox device, and only to its
//                          own device's address: a sandbox cannot choose where it is DNATed)
//   chain px_<id>          from the sandbox's own address, TCP not to the host itself, not to
//                          what the forward chain always refuses, not DNS to its resolvers, not
//                          to an allowOut address, and to a denyOut one (only a connection its
//                          address rules would refuse can be let through by a name): DNAT to
//                          its listener. With request rules (network.rules) all of its TCP
//                          but the exceptions above is DNATed: a rule's host may be anywhere,
//                          and what has no rule is passed through untouched
//   chain proxy_v1         empty: says this version of these parts is in the table
//
// Added to the table without changing its schema chain, so that a server of
// the previous version on the same host keeps sharing the table (it only
// rewrites a table whose schema it does not know); ensured before each use,
// as such a server may have rewritten it meanwhile.
import { NET_BASE, withHostLock } from "../addresses.js";
import { nft, TABLE } from "../nft-run.js";
import { runCommand } from "../../../host/commands.js";
import { findExecutable } from "../../../host/executables.js";
import type { EgressPolicy } from "../../../domain/network.js";

const DEVICES = `"l2b*"`;
const MARKER = "proxy_v1";

/**
 * The port every sandbox's proxy listens on, on its own /30's host address
 * (one address per sandbox, so one port serves all, across servers on a host
 * and across restarts, and the input rule needs no per-sandbox element).
 */
export const LISTENER_PORT = 15_093;
export const proxyChain = (sandboxId: string) => `px_${sandboxId}`;

async function present(): Promise<boolean> {
  return runCommand(findExecutable("nft")!, ["list", "chain", ...TABLE.split(" "), MARKER]).then(
    () => true,
    () => false,
  );
}

/** The proxy's shared parts of the table (once; the table itself must exist: ensureTable). */
export async function ensureRedirectParts(): Promise<void> {
  if (await present()) return;
  await withHostLock("proxy-table", async () => {
    if (await present()) return;
    await nft(
      [
        `add chain ${TABLE} ${MARKER}`,
        `add map ${TABLE} proxied { type ifname : verdict; }`,
        `add chain ${TABLE} proxy_prerouting { type nat hook prerouting priority dstnat; policy accept; }`,
        `flush chain ${TABLE} proxy_prerouting`,
        `add rule ${TABLE} proxy_prerouting iifname ${DEVICES} iifname vmap @proxied`,
        `insert rule ${TABLE} input iifname ${DEVICES} ct status dnat ip daddr ${NET_BASE} tcp dport ${LISTENER_PORT} accept`,
      ].join("\n"),
    );
  });
}

/** Redirects the sandbox's outbound TCP (what its policy does not settle by address) to its listener. */
export async function redirectToProxy(device: string, sandboxId: string, policy: EgressPolicy, guest: string, host: string, dns: string[]): Promise<void> {
  await ensureRedirectParts();
  const chain = proxyChain(sandboxId);
  const rules = Object.keys(policy.rules ?? {}).length > 0;
  const lines = [
    `add chain ${TABLE} ${chain}`,
    `flush chain ${TABLE} ${chain}`,
    `add rule ${TABLE} ${chain} ip saddr != ${guest} return`,
    `add rule ${TABLE} ${chain} meta l4proto != tcp return`,
    `add rule ${TABLE} ${chain} fib daddr type local return`,
    `add rule ${TABLE} ${chain} ip daddr { ${NET_BASE}, 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/3 } return`,
    `add rule ${TABLE} ${chain} ip daddr @infra return`,
    ...dns.map((d) => `add rule ${TABLE} ${chain} ip daddr ${d} tcp dport 53 return`),
    ...(rules
      ? [`add rule ${TABLE} ${chain} meta l4proto tcp dnat ip to ${host}:${LISTENER_PORT}`]
      : [
          ...policy.allow.map((a) => `add rule ${TABLE} ${chain} ip daddr ${a} return`),
          ...policy.deny.map((d) => `add rule ${TABLE} ${chain} ip daddr ${d} meta l4proto tcp dnat ip to ${host}:${LISTENER_PORT}`),
        ]),
    `add element ${TABLE} proxied { "${device}" : jump ${chain} }`,
  ];
  await nft(lines.join("\n"));
}

/** Stops redirecting (new connections go by the forward chain again); what is already gone is fine. */
export async function stopRedirect(device: string, sandboxId: string): Promise<void> {
  await nft(`delete element ${TABLE} proxied { "${device}" }\ndelete chain ${TABLE} ${proxyChain(sandboxId)}`).catch(() => undefined);
}
