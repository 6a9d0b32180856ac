// Egress policies on the host (E2B's network.allowOut / denyOut) for every
// runtime whose sandboxes reach the network through a host device named
// l2b<short id> (a process sandbox's veth, a VM's tap): nftables rules on
// that device, where code in the sandbox cannot change them.
//
//   table ip locale2b_egress
//     map sandboxes            ifname → jump sbx_<id>   (one element per sandbox with a policy)
//     chain forward / input    iifname vmap @sandboxes  (to the internet / to the host itself)
//     chain postrouting        masquerade NET_BASE leaving by any other device
//     chain sbx_<id>           DNS to the host's resolvers: accept
//                              allow CIDRs: accept; deny CIDRs: reject (admin-prohibited)
import { readFileSync, writeFileSync } from "node:fs";
import type { Logger } from "pino";
import { findExecutable } from "../host/checks.js";
import type { EgressPolicy } from "../manager/egress.js";
import { deleteDevice, NET_BASE, run } from "./host-net.js";

const TABLE = "locale2b_egress";

/** The tools a runtime needs for egress policies that this host lacks, as a reason; undefined when it has them. */
export function missingTools(tools: string[]): string | undefined {
  const missing = tools.filter((t) => !findExecutable(t));
  if (missing.length) return `missing ${missing.join(", ")} (run scripts/setup-host, or install nftables, iproute2 and util-linux)`;
  return undefined;
}

/** Runs an nft script as one transaction. */
async function nft(script: string): Promise<void> {
  const done = run(findExecutable("nft")!, ["-f", "-"], { encoding: "utf8" });
  done.child.stdin?.end(script);
  await done.catch((err: { stderr?: string; message: string }) => {
    throw new Error(`nft failed: ${(err.stderr ?? err.message).trim()}`);
  });
}

let tableReady: Promise<void> | undefined;

/** The shared table and chains (once per server process; an existing table from an earlier run is kept). */
export function ensureEgressTable(log: Logger): Promise<void> {
  tableReady ??= (async () => {
    const exists = await run(findExecutable("nft")!, ["list", "table", "ip", TABLE]).then(
      () => true,
      () => false,
    );
    if (!exists) {
      await nft(
        [
          `add table ip ${TABLE}`,
          `add map ip ${TABLE} sandboxes { type ifname : verdict; }`,
          `add chain ip ${TABLE} forward { type filter hook forward priority filter; policy accept; }`,
          `add rule ip ${TABLE} forward iifname vmap @sandboxes`,
          `add chain ip ${TABLE} input { type filter hook input priority filter; policy accept; }`,
          `add rule ip ${TABLE} input iifname vmap @sandboxes`,
          `add chain ip ${TABLE} postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
          `add rule ip ${TABLE} postrouting ip saddr ${NET_BASE} oifname != "l2b*" masquerade`,
        ].join("\n"),
      );
    }
    if (readFileSync("/proc/sys/net/ipv4/ip_forward", "utf8").trim() !== "1") {
      writeFileSync("/proc/sys/net/ipv4/ip_forward", "1\n");
      log.info("enabled IPv4 forwarding (net.ipv4.ip_forward=1) for sandbox networks");
    }
  })().catch((err: unknown) => {
    tableReady = undefined;
    throw err;
  });
  return tableReady;
}

/** The IPv4 name servers sandboxes resolve with (the host's /etc/resolv.conf, which they share). */
export function nameServers(): string[] {
  try {
    return readFileSync("/etc/resolv.conf", "utf8")
      .split("\n")
      .map((l) => /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(l)?.[1])
      .filter((a): a is string => a !== undefined && !a.startsWith("127."));
  } catch {
    return [];
  }
}

/** The nft chain of a sandbox's policy. */
export const policyChain = (sandboxId: string) => `sbx_${sandboxId}`;

/** The sandbox's chain: DNS first, then allow (wins), then deny. */
export function policyRules(chain: string, policy: EgressPolicy, dns: string[]): string[] {
  const rules = [`add chain ip ${TABLE} ${chain}`];
  for (const d of dns) rules.push(`add rule ip ${TABLE} ${chain} ip daddr ${d} meta l4proto { tcp, udp } th dport 53 accept`);
  for (const a of policy.allow) rules.push(`add rule ip ${TABLE} ${chain} ip daddr ${a} accept`);
  for (const d of policy.deny) rules.push(`add rule ip ${TABLE} ${chain} ip daddr ${d} reject with icmp type admin-prohibited`);
  return rules;
}

/** Applies a policy to everything entering the host from `device` (created or replaced). */
export async function applyPolicy(device: string, sandboxId: string, policy: EgressPolicy, log: Logger): Promise<void> {
  await ensureEgressTable(log);
  const chain = policyChain(sandboxId);
  await nft(
    [
      `add chain ip ${TABLE} ${chain}`,
      `flush chain ip ${TABLE} ${chain}`,
      ...policyRules(chain, policy, nameServers()),
      `add element ip ${TABLE} sandboxes { "${device}" : jump ${chain} }`,
    ].join("\n"),
  );
}

/** Removes a sandbox's policy; what is already gone is fine. */
export async function removePolicy(device: string, sandboxId: string): Promise<void> {
  const bin = findExecutable("nft");
  if (!bin) return;
  await run(bin, ["delete", "element", "ip", TABLE, "sandboxes", `{ "${device}" }`]).catch(() => undefined);
  await run(bin, ["delete", "chain", "ip", TABLE, policyChain(sandboxId)]).catch(() => undefined);
}

/** A sandbox is gone: its policy and its host device (veth or tap) go too; what is already gone is fine. */
export async function releaseDevice(device: string, sandboxId: string): Promise<void> {
  await removePolicy(device, sandboxId);
  await deleteDevice(device);
}
