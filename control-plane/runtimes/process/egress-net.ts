// The network of a process sandbox with an egress policy: its own network
// namespace joined to the host by a veth pair on a /30 of NET_BASE, NATed to
// the host's uplink, the policy enforced on the host end (../egress-nft.ts).
import { readlinkSync } from "node:fs";
import type { Logger } from "pino";
import { findExecutable } from "../../host/checks.js";
import type { EgressPolicy } from "../../manager/egress.js";
import { applyPolicy, missingTools, releaseDevice } from "../egress-nft.js";
import { addresses, deviceName, ip, withFreeIndex } from "../host-net.js";

/** What a sandbox's network is, kept with the sandbox so it can be torn down after a restart. */
export interface EgressRecord {
  device: string;
  index: number;
}

/** What this host lacks for egress policies on the process runtime, or undefined when it has it all. */
export function egressUnsupported(mode: string, netns: boolean): string | undefined {
  if (mode !== "root") return "they need the server to run as root";
  if (!netns) return "network namespaces are not available";
  return missingTools(["nft", "ip", "nsenter"]);
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
  const ns = await netnsOf(pid);
  const device = deviceName(sandboxId);
  const peer = `l2p${sandboxId.slice(-12)}`;
  const inNs = [findExecutable("nsenter")!, `--net=${ns}`];
  return withFreeIndex(async (index) => {
    const a = addresses(index);
    const rec = { device, index };
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
      await applyPolicy(device, sandboxId, policy, log);
    } catch (err) {
      await releaseDevice(device, sandboxId);
      throw err;
    }
    log.debug({ device, address: a.guest, allow: policy.allow, deny: policy.deny }, "sandbox network set up");
    return rec;
  });
}
