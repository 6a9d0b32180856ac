import { existsSync } from "node:fs";
import type { Logger } from "pino";
import type { EgressPolicy } from "../../domain/network.js";
import { applyPolicy, missingTools, releaseDevice } from "../net/nft.js";
import { nameServers } from "../net/dns.js";
import { createTap } from "../firecracker/network.js";
import type { TapRecord } from "../firecracker/state.js";
import { addresses } from "../net/addresses.js";
import type { TapNetwork } from "./command.js";

/** Why this host cannot give VMs a filtered tap network, or undefined when it can. */
export function tapUnsupported(): string | undefined {
  if (process.getuid?.() !== 0) return "tap devices need the server to run as root";
  if (!existsSync("/dev/net/tun")) return "/dev/net/tun is missing";
  return missingTools(["nft", "ip"]);
}

/**
 * A VM with an egress policy gets a tap device on a /30 of NET_BASE (the
 * same pool as Firecracker's taps and process sandboxes' veths) instead of
 * QEMU's user-mode NAT, which cannot filter: nft rules on the tap enforce
 * the policy. On failure nothing is left behind.
 */
export async function tapForPolicy(sandboxId: string, policy: EgressPolicy, log: Logger): Promise<{ tap: TapRecord; network: TapNetwork }> {
  const tap = await createTap(sandboxId, undefined, log);
  try {
    await applyPolicy(tap.name, sandboxId, policy, log);
  } catch (err) {
    await releaseDevice(tap.name, sandboxId);
    throw err;
  }
  const a = addresses(tap.index);
  return { tap, network: { tap: tap.name, mac: tap.guestMac, guest: a.guest, gateway: a.host, netmask: a.netmask, dns: nameServers()[0] ?? "1.1.1.1" } };
}
