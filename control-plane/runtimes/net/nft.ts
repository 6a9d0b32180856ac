// The host's rules for sandbox networks: every runtime whose sandboxes reach
// the network through a host device named l2b<short id> (a process sandbox's
// veth, a VM's tap) is filtered here, where code in the sandbox cannot change
// anything.
//
//   table inet locale2b
//     map sandboxes          ifname → jump sbx_<id>            (one element per sandbox device)
//     set infra              addresses of the server's own infrastructure (its Postgres, the
//                            Kubernetes API, LOCALE2B_SANDBOX_DENY): setInfrastructure()
//     set private            private-ranges.ts: RFC 1918 and 100.64.0.0/10
//     chain forward          from a sandbox: never to another sandbox's /30, link-local (cloud
//                            metadata), multicast or @infra (no allowOut opens them); to @private
//                            only as its own chain says, else rejected; then its own chain
//                            (anti-spoofing, egress policy); to a sandbox: only replies
//     chain input            from a sandbox to the host itself: only DNS to a host-local resolver
//     chain postrouting      masquerade NET_BASE leaving by any other device
//     chain sbx_<id>         only the sandbox's own source address; DNS to the resolvers;
//                            @private rejected but the operator's opened parts
//                            (LOCALE2B_SANDBOX_ALLOW_PRIVATE); allow CIDRs accept; deny CIDRs
//                            reject (admin-prohibited); the opened private parts accept
// IPv6 is off on every sandbox device (and dropped here too): a sandbox has IPv4 only.
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import type { Logger } from "pino";
import { findExecutable } from "../../host/executables.js";
import { runCommand } from "../../host/commands.js";
import { deleteDevice, deviceName, NET_BASE, withHostLock } from "./addresses.js";
import { hostLocalAddresses, nameServers } from "./dns.js";
import type { EgressPolicy } from "../../domain/network.js";
import { nft, TABLE } from "./nft-run.js";
import { dropProxy, setProxy } from "./egress-proxy/proxies.js";
import { setProxyInfrastructure } from "./egress-proxy/sandbox-proxy.js";
import { openedPrivate, PRIVATE_RANGES } from "./private-ranges.js";

const DEVICES = `"l2b*"`;
/** An empty chain naming this version of the table's rules: another version is replaced. */
const SCHEMA = "schema_5";

/** The tools egress rules need that this host lacks, as a reason; undefined when it has them. */
export function missingTools(tools: string[]): string | undefined {
  const missing = tools.filter((t) => !findExecutable(t));
  if (missing.length) return `missing ${missing.join(", ")} (run scripts/setup-host, or install nftables, iproute2 and util-linux)`;
  return undefined;
}

/** The shared table's rules (replacing an older version of them). */
export function tableRules(localDns: string[]): string[] {
  const dnsIn = localDns.length ? [`add rule ${TABLE} input iifname ${DEVICES} ip daddr { ${localDns.join(", ")} } meta l4proto { tcp, udp } th dport 53 accept`] : [];
  return [
    `add table ${TABLE}`,
    `delete table ${TABLE}`,
    `add table ${TABLE}`,
    `add chain ${TABLE} ${SCHEMA}`,
    `add map ${TABLE} sandboxes { type ifname : verdict; }`,
    `add set ${TABLE} infra { type ipv4_addr; flags interval; auto-merge; }`,
    `add set ${TABLE} private { type ipv4_addr; flags interval; auto-merge; elements = { ${PRIVATE_RANGES.join(", ")} } }`,
    `add chain ${TABLE} forward { type filter hook forward priority filter - 5; policy accept; }`,
    `add rule ${TABLE} forward iifname ${DEVICES} meta nfproto ipv6 drop`,
    `add rule ${TABLE} forward iifname ${DEVICES} ip daddr { ${NET_BASE}, 169.254.0.0/16, 224.0.0.0/3 } reject with icmp type admin-prohibited`,
    `add rule ${TABLE} forward iifname ${DEVICES} ip daddr @infra reject with icmp type admin-prohibited`,
    // Private space, as dialed or after the host's own DNAT (a Kubernetes Service's): the sandbox's chain decides
    // (DNS to the host's resolvers, which may be private, and the parts its server opened); no chain, refused.
    ...["ip daddr", "ct original ip daddr"].flatMap((d) => [
      `add rule ${TABLE} forward iifname ${DEVICES} ${d} @private iifname vmap @sandboxes`,
      `add rule ${TABLE} forward iifname ${DEVICES} ${d} @private reject with icmp type admin-prohibited`,
    ]),
    `add rule ${TABLE} forward iifname ${DEVICES} iifname vmap @sandboxes`,
    `add rule ${TABLE} forward oifname ${DEVICES} ct state established,related accept`,
    `add rule ${TABLE} forward oifname ${DEVICES} drop`,
    `add chain ${TABLE} input { type filter hook input priority filter - 5; policy accept; }`,
    `add rule ${TABLE} input iifname ${DEVICES} ct state established,related accept`,
    ...dnsIn,
    `add rule ${TABLE} input iifname ${DEVICES} meta nfproto ipv4 reject with icmp type admin-prohibited`,
    `add rule ${TABLE} input iifname ${DEVICES} drop`,
    `add chain ${TABLE} postrouting { type nat hook postrouting priority srcnat; policy accept; }`,
    `add rule ${TABLE} postrouting ip saddr ${NET_BASE} oifname != ${DEVICES} masquerade`,
  ];
}

let tableReady: Promise<void> | undefined;

/** Whether the table this server version writes is there (its schema chain names the version). */
const schemaPresent = () =>
  runCommand(findExecutable("nft")!, ["list", "chain", ...TABLE.split(" "), SCHEMA]).then(
    () => true,
    () => false,
  );

/**
 * The shared table (once per server process: rewritten from scratch, so an
 * older server's version of it is replaced; each live sandbox's chain is
 * re-added by applyPolicy when it is adopted) and IPv4 forwarding.
 */
export function ensureTable(log: Logger): Promise<void> {
  tableReady ??= (async () => {
    // A table this server version wrote already (a restart, or another server on this host): keep it and
    // the sandboxes' chains in it. Writing it is locked across processes, so that no server wipes the
    // chains another one just added.
    if (!(await schemaPresent())) {
      await withHostLock("table", async () => {
        if (!(await schemaPresent())) await nft(tableRules(hostLocalAddresses(nameServers())).join("\n"));
      });
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

/**
 * The addresses no sandbox may reach whatever its policy says (allowOut
 * included): the server's own infrastructure, e.g. its Postgres and the
 * Kubernetes API on a private network a sandbox could otherwise route to.
 * Replaces the previous list. IPv4 addresses and CIDRs.
 */
export async function setInfrastructure(addresses: string[], log: Logger): Promise<void> {
  if (!findExecutable("nft") || process.getuid?.() !== 0) return;
  await ensureTable(log);
  const v4 = [...new Set(addresses.filter((a) => /^\d{1,3}(\.\d{1,3}){3}(\/\d{1,2})?$/.test(a)))];
  lastInfrastructure = v4;
  setProxyInfrastructure(v4);
  await nft([`flush set ${TABLE} infra`, ...(v4.length ? [`add element ${TABLE} infra { ${v4.join(", ")} }`] : [])].join("\n"));
}

/** The nft chain of a sandbox. */
export const policyChain = (sandboxId: string) => `sbx_${sandboxId}`;

/**
 * A sandbox's chain: its own address only, DNS first, then private space but
 * `opened` refused (no allowOut opens it), then allow (wins), then deny, then
 * `opened` accepted (the forward chain refuses private space the chain leaves
 * undecided).
 */
export function policyRules(chain: string, policy: EgressPolicy, dns: string[], source?: string, opened: readonly string[] = openedPrivate()): string[] {
  const rules = [`add chain ${TABLE} ${chain}`];
  if (source) rules.push(`add rule ${TABLE} ${chain} ip saddr != ${source} drop`);
  // As dialed: a resolver behind the host's DNAT (a cluster's DNS Service) is reached at another address.
  for (const d of dns) rules.push(`add rule ${TABLE} ${chain} ct original ip daddr ${d} meta l4proto { tcp, udp } ct original proto-dst 53 accept`);
  for (const dst of ["ip daddr", "ct original ip daddr"]) {
    const except = opened.length ? ` ${dst} != { ${opened.join(", ")} }` : "";
    rules.push(`add rule ${TABLE} ${chain} ${dst} @private${except} reject with icmp type admin-prohibited`);
  }
  for (const a of policy.allow) rules.push(`add rule ${TABLE} ${chain} ip daddr ${a} accept`);
  for (const d of policy.deny) rules.push(`add rule ${TABLE} ${chain} ip daddr ${d} reject with icmp type admin-prohibited`);
  if (opened.length) rules.push(`add rule ${TABLE} ${chain} ip daddr { ${opened.join(", ")} } accept`);
  return rules;
}

/** No IPv6 on a sandbox's host-side device: no link-local route from the sandbox to the host's services. */
export function disableIpv6(device: string): void {
  try {
    writeFileSync(`/proc/sys/net/ipv6/conf/${device}/disable_ipv6`, "1\n");
  } catch {
    // no IPv6 in this kernel: nothing to turn off
  }
}

/**
 * Applies a policy to everything entering the host from `device` (created or
 * replaced in one transaction, so the sandbox's connections keep their state).
 * `source`: the only address the sandbox may send from.
 */
export async function applyPolicy(device: string, sandboxId: string, policy: EgressPolicy, log: Logger, source?: string): Promise<void> {
  applied.set(device, { sandboxId, policy, log, ...(source ? { source } : {}) });
  watchRules(log);
  await ensureTable(log);
  const chain = policyChain(sandboxId);
  const script = [
    `add chain ${TABLE} ${chain}`,
    `flush chain ${TABLE} ${chain}`,
    ...policyRules(chain, policy, nameServers(), source),
    `add element ${TABLE} sandboxes { "${device}" : jump ${chain} }`,
  ].join("\n");
  await nft(script).catch(async (err: unknown) => {
    // The table went since this process wrote it (a firewall reload, another version's server): again, once.
    if (await schemaPresent()) throw err;
    tableReady = undefined;
    await ensureTable(log);
    await nft(script);
  });
  // Host names: the sandbox's TCP that its addresses do not settle goes through its egress proxy.
  await setProxy(device, sandboxId, policy, log);
}

/** What applyPolicy wrote for each live sandbox device of this process: written again if it goes missing. */
const applied = new Map<string, { sandboxId: string; policy: EgressPolicy; log: Logger; source?: string }>();
/** How often the table and this process's sandbox chains are looked at. */
export const RULES_CHECK_MS = 3_000;
let rulesTimer: NodeJS.Timeout | undefined;
let checking = false;
let lastInfrastructure: string[] = [];

/**
 * While this process has sandboxes with rules, their isolation must not end
 * with a firewall reload (`nft flush ruleset`, firewalld, ufw) or a chain
 * deleted by hand: every RULES_CHECK_MS the table is listed, and what is
 * missing (the whole table, or a sandbox's chain) is written again.
 */
function watchRules(log: Logger): void {
  if (rulesTimer) return;
  rulesTimer = setInterval(() => void checkRules(log), RULES_CHECK_MS);
  rulesTimer.unref();
}

async function checkRules(log: Logger): Promise<void> {
  if (checking) return;
  if (applied.size === 0) {
    clearInterval(rulesTimer);
    rulesTimer = undefined;
    return;
  }
  checking = true;
  try {
    const listed = await runCommand(findExecutable("nft")!, ["list", "table", ...TABLE.split(" ")]).then((r) => String(r.stdout), () => "");
    const tableGone = !listed.includes(`chain ${SCHEMA} {`);
    const missing = [...applied].filter(([, a]) => tableGone || !listed.includes(`chain ${policyChain(a.sandboxId)} {`));
    if (missing.length === 0) return;
    log.warn({ tableGone, sandboxes: missing.map(([, a]) => a.sandboxId) }, "sandbox network rules went missing (a firewall reload?): writing them again");
    if (tableGone) {
      tableReady = undefined;
      await ensureTable(log);
      if (lastInfrastructure.length) await setInfrastructure(lastInfrastructure, log);
    }
    for (const [device, a] of missing) {
      if (applied.get(device) !== a) continue; // removed or replaced meanwhile
      if (!existsSync(`/sys/class/net/${device}`)) {
        applied.delete(device); // the sandbox is gone (killed by another server)
        continue;
      }
      await applyPolicy(device, a.sandboxId, a.policy, a.log, a.source).catch((err: unknown) => a.log.error({ err, sandboxId: a.sandboxId }, "cannot write the sandbox's network rules again"));
    }
  } finally {
    checking = false;
  }
}

/** A server stops and leaves its sandboxes running: their rules are no longer this process's to keep. */
export function forgetPolicies(sandboxIds: string[]): void {
  const ids = new Set(sandboxIds);
  for (const [device, a] of applied) if (ids.has(a.sandboxId)) applied.delete(device);
}

/** Removes a sandbox's chain; what is already gone is fine. */
export async function removePolicy(device: string, sandboxId: string): Promise<void> {
  const bin = findExecutable("nft");
  if (!bin) return;
  if (applied.get(device)?.sandboxId === sandboxId) applied.delete(device);
  await dropProxy(sandboxId, device);
  await runCommand(bin, ["delete", "element", ...TABLE.split(" "), "sandboxes", `{ "${device}" }`]).catch(() => undefined);
  await runCommand(bin, ["delete", "chain", ...TABLE.split(" "), policyChain(sandboxId)]).catch(() => undefined);
}

/** A sandbox is gone: its chain and its host device (veth or tap) go too; what is already gone is fine. */
export async function releaseDevice(device: string, sandboxId: string): Promise<void> {
  await removePolicy(device, sandboxId);
  await deleteDevice(device);
}

/**
 * Releases the host device the sandbox's id names (its veth's host end or
 * its tap), with its rules, if there is one: for a start the server died in
 * before it recorded the device.
 */
export async function releaseSandboxDevice(sandboxId: string): Promise<void> {
  const name = deviceName(sandboxId);
  if (existsSync(`/sys/class/net/${name}`)) await releaseDevice(name, sandboxId);
}

/**
 * Removes the rules of sandboxes whose host device is gone (what a server
 * killed before it released them left): their element of the map and their
 * chain, and chains no element names. The table is read before the devices:
 * an element is added (with its chain, in one transaction) only once its
 * device exists, so an element whose device is missing from the later read
 * is stale, never a start in flight in another server. Returns how many
 * sandboxes' rules went; without nft or the table, nothing.
 */
export async function removeStalePolicies(log: Logger): Promise<number> {
  const bin = findExecutable("nft");
  if (!bin || process.getuid?.() !== 0) return 0;
  let table: { nftables?: Record<string, unknown>[] };
  try {
    table = JSON.parse((await runCommand(bin, ["-j", "list", "table", ...TABLE.split(" ")])).stdout) as typeof table;
  } catch {
    return 0; // no table: no sandbox network was ever set up here
  }
  const elements: [string, string][] = [];
  const chains: string[] = [];
  for (const item of table.nftables ?? []) {
    const map = item.map as { name?: string; elem?: unknown[] } | undefined;
    if (map?.name === "sandboxes" || map?.name === "proxied") {
      for (const e of map.elem ?? []) {
        const [device, verdict] = e as [unknown, { jump?: { target?: unknown } }];
        if (typeof device === "string" && typeof verdict?.jump?.target === "string") elements.push([device, verdict.jump.target]);
      }
    }
    const chain = item.chain as { name?: unknown } | undefined;
    if (typeof chain?.name === "string" && /^(sbx|px)_/.test(chain.name)) chains.push(chain.name);
  }
  let devices: Set<string>;
  try {
    devices = new Set(readdirSync("/sys/class/net"));
  } catch {
    return 0;
  }
  const named = new Set(elements.map(([, chain]) => chain));
  const stale = elements.filter(([device]) => !devices.has(device));
  const script = [
    ...stale.map(([device, chain]) => `delete element ${TABLE} ${chain.startsWith("px_") ? "proxied" : "sandboxes"} { "${device}" }\ndelete chain ${TABLE} ${chain}`),
    ...chains.filter((c) => !named.has(c)).map((c) => `delete chain ${TABLE} ${c}`),
  ];
  // One by one: a chain another server is deleting meanwhile must not fail the rest.
  let removed = 0;
  for (const step of script) if (await nft(step).then(() => true, () => false)) removed++;
  if (removed) log.info({ count: removed }, "removed the network rules of sandboxes that are gone");
  return removed;
}
