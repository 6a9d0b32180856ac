// The network of a process sandbox with an egress policy (E2B's
// network.allowOut / denyOut): its own network namespace joined to the host
// by a veth pair on a /30 of NET_BASE, NATed to the host's uplink, with the
// policy enforced by nftables on the host side, where the sandbox cannot
// change it:
//
//   table ip locale2b_egress
//     map sandboxes            ifname → jump sbx_<id>   (one element per sandbox)
//     chain forward / input    iifname vmap @sandboxes  (to the internet / to the host itself)
//     chain postrouting        masquerade NET_BASE leaving by any other device
//     chain sbx_<id>           DNS to the host's resolvers: accept
//                              allow CIDRs: accept; deny CIDRs: reject (admin-prohibited)
import { readFileSync, readlinkSync, writeFileSync } from "node:fs";
import type { Logger } from "pino";
import { findExecutable } from "../../host/checks.js";
import type { EgressPolicy } from "../../manager/egress.js";
import { addresses, deleteDevice, deviceName, ip, NET_BASE, run, withFreeIndex } from "../host-net.js";

const TABLE = "locale2b_egress";

/** What a sandbox's network is, kept with the sandbox so it can be torn down after a restart. */
export interface EgressRecord {
  device: string;
  index: number;
  chain: string;
}

/** What this host lacks for egress policies, or undefined when it has it all. */
export function egressUnsupported(mode: string, netns: boolean): string | undefined {
  if (mode !== "root") return "they need the server to run as root";
  if (!netns) return "network namespaces are not available";
  const missing = ["nft", "ip", "nsenter"].filter((t) => !findExecutable(t));
  if (missing.length) return `missing ${missing.join(", ")} (run scripts/setup-host, or install nftables, iproute2 and util-linux)`;
  return undefined;
}

async function nft(script: string): Promise<void> {
  const bin = findExecutable("nft")!;
  await new Promise<void>((resolve, reject) => {
    const child = run(bin, ["-f", "-"], { encoding: "utf8" });
    child.child.stdin?.end(script);
    child.then(
      () => resolve(),
      (err: { stderr?: string; message: string }) => reject(new Error(`nft failed: ${(err.stderr ?? err.message).trim()}`)),
    );
  });
}

let tableReady: Promise<void> | undefined;

/** The shared table and chains (once per server process; an existing table from an earlier run is kept). */
function ensureTable(log: Logger): Promise<void> {
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
function nameServers(): string[] {
  try {
    return readFileSync("/etc/resolv.conf", "utf8")
      .split("\n")
      .map((l) => /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(l)?.[1])
      .filter((a): a is string => a !== undefined && !a.startsWith("127."));
  } catch {
    return [];
  }
}

/** The sandbox's chain: DNS first, then allow (wins), then deny. */
export function policyRules(chain: string, policy: EgressPolicy, dns: string[]): string[] {
  const rules = [`add chain ip ${TABLE} ${chain}`];
  for (const d of dns) rules.push(`add rule ip ${TABLE} ${chain} ip daddr ${d} meta l4proto { tcp, udp } th dport 53 accept`);
  for (const a of policy.allow) rules.push(`add rule ip ${TABLE} ${chain} ip daddr ${a} accept`);
  for (const d of policy.deny) rules.push(`add rule ip ${TABLE} ${chain} ip daddr ${d} reject with icmp type admin-prohibited`);
  return rules;
}

/** Waits until `pid` (the sandbox's unshare, right after spawn) is in a network namespace other than ours. */
async function netnsOf(pid: number): Promise<string> {
  const ours = readlinkSync("/proc/self/ns/net");
  for (let i = 0; i < 500; i++) {
    let ns: string | undefined;
    try {
      ns = readlinkSync(`/proc/${pid}/ns/net`);
    } catch {
      throw new Error("the sandbox exited before its network was set up");
    }
    if (ns !== ours) return `/proc/${pid}/ns/net`;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error("the sandbox did not get its own network namespace within 5 s");
}

/**
 * Joins a new sandbox's network namespace (that of `pid`) to the host and
 * applies its policy. On failure nothing is left behind.
 */
export async function setUpEgress(sandboxId: string, pid: number, policy: EgressPolicy, log: Logger): Promise<EgressRecord> {
  await ensureTable(log);
  const ns = await netnsOf(pid);
  const device = deviceName(sandboxId);
  const peer = `l2p${sandboxId.slice(-12)}`;
  const chain = `sbx_${sandboxId}`;
  const inNs = [findExecutable("nsenter")!, `--net=${ns}`];
  return withFreeIndex(async (index) => {
    const a = addresses(index);
    const rec = { device, index, chain };
    try {
      await ip(["link", "add", device, "type", "veth", "peer", "name", peer]);
      await ip(["link", "set", peer, "netns", String(pid)]);
      await ip(["addr", "add", `${a.host}/${a.prefix}`, "dev", device]);
      await ip(["link", "set", device, "up"]);
      await ip(["link", "set", peer, "name", "eth0"], inNs);
      await ip(["addr", "add", `${a.guest}/${a.prefix}`, "dev", "eth0"], inNs);
      await ip(["link", "set", "eth0", "up"], inNs);
      await ip(["link", "set", "lo", "up"], inNs);
      await ip(["route", "add", "default", "via", a.host], inNs);
      await nft([...policyRules(chain, policy, nameServers()), `add element ip ${TABLE} sandboxes { "${device}" : jump ${chain} }`].join("\n"));
    } catch (err) {
      await tearDownEgress(rec);
      throw err;
    }
    log.debug({ device, address: a.guest, allow: policy.allow, deny: policy.deny }, "sandbox network set up");
    return rec;
  });
}

/** Replaces a sandbox's rules in one transaction (its connections keep their conntrack state). */
export async function replaceEgressRules(rec: EgressRecord, policy: EgressPolicy): Promise<void> {
  await nft([`flush chain ip ${TABLE} ${rec.chain}`, ...policyRules(rec.chain, policy, nameServers())].join("\n"));
}

/** Removes a sandbox's rules and its veth (gone anyway with its namespace); what is already gone is fine. */
export async function tearDownEgress(rec: EgressRecord): Promise<void> {
  const bin = findExecutable("nft");
  if (bin) {
    await run(bin, ["delete", "element", "ip", TABLE, "sandboxes", `{ "${rec.device}" }`]).catch(() => undefined);
    await run(bin, ["delete", "chain", "ip", TABLE, rec.chain]).catch(() => undefined);
  }
  await deleteDevice(rec.device);
}
