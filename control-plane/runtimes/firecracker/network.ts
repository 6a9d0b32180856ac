// Network for sandboxes created with allowInternetAccess: one tap device per
// VM (`l2b<short id>`) with a /30 of NET_BASE, the host at .1 and the guest
// at .2 (the guest kernel configures eth0 from the `ip=` boot argument).
// Egress to the internet needs the host to forward and masquerade NET_BASE:
// the host's sandbox table (../net/nft.ts) does it, and filters the tap when the
// sandbox has an egress policy.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import type { Logger } from "pino";
import { addresses, deleteDevice, deviceName, ip, withFreeIndex } from "../net/addresses.js";
import { applyPolicy, disableIpv6, ensureTable, releaseDevice } from "../net/nft.js";
import type { InstanceSpec } from "../runtime.js";
import type { TapRecord } from "./state.js";
import { setting } from "../../settings.js";

/** The DNS server the `ip=` boot argument names (the guest's init copies /proc/net/pnp to resolv.conf). */
const DEFAULT_DNS = "1.1.1.1";

/** `l2b` + the last 12 characters of the id: fits Linux's 15-byte interface names. */
export const tapName = deviceName;

/** A stable, locally administered unicast MAC for the guest's eth0. */
export function guestMac(sandboxId: string): string {
  const h = createHash("sha256").update(sandboxId).digest();
  return ["06", "00", ...[0, 1, 2, 3].map((i) => h[i]!.toString(16).padStart(2, "0"))].join(":");
}

/** The kernel's `ip=<client>:<server>:<gw>:<netmask>:<hostname>:<device>:<autoconf>:<dns0>` boot argument. */
export function ipBootArg(index: number, dns = setting("LOCALE2B_FIRECRACKER_DNS") || DEFAULT_DNS): string {
  const a = addresses(index);
  return `ip=${a.guest}::${a.host}:${a.netmask}::eth0:off:${dns}`;
}

/** Creates the tap device with its /30 (owned by `uid` when the VMM runs as that user under the jailer). */
async function setUp(rec: TapRecord, uid: number | undefined): Promise<void> {
  if (!existsSync("/dev/net/tun")) throw new Error("cannot give the sandbox a network: /dev/net/tun is missing");
  const a = addresses(rec.index);
  await ip(["tuntap", "add", "dev", rec.name, "mode", "tap", ...(uid !== undefined ? ["user", String(uid)] : [])]);
  disableIpv6(rec.name);
  try {
    await ip(["addr", "add", `${a.host}/${a.prefix}`, "dev", rec.name]);
    await ip(["link", "set", rec.name, "up"]);
  } catch (err) {
    await deleteTap(rec.name);
    throw err;
  }
}

/** A new tap device for a sandbox, on a free /30. */
export async function createTap(sandboxId: string, uid: number | undefined, log: Logger): Promise<TapRecord> {
  const rec = await withFreeIndex(async (index) => {
    const r: TapRecord = { name: tapName(sandboxId), index, guestMac: guestMac(sandboxId) };
    await setUp(r, uid);
    return r;
  });
  log.debug({ tap: rec.name, ...addresses(rec.index) }, "tap device created");
  return rec;
}

/** Brings back a sandbox's tap device (resume: the snapshot names it). */
export async function restoreTap(rec: TapRecord, uid: number | undefined): Promise<void> {
  if (existsSync(`/sys/class/net/${rec.name}`)) return;
  await setUp(rec, uid);
}

/** Removes a tap device; one that is already gone is fine. */
export async function deleteTap(name: string): Promise<void> {
  if (!existsSync(`/sys/class/net/${name}`)) return;
  await deleteDevice(name);
}

/**
 * The tap of a new VM: filtered by the sandbox's egress policy when it has
 * one, else NATed to the internet (`internet: false` with no policy: every
 * destination denied, for a restored VM that has a network device it must
 * keep although the new sandbox asked for no internet).
 */
export async function vmNetwork(spec: InstanceSpec, uid: number | undefined, internet = true): Promise<TapRecord> {
  const { sandboxId, log } = spec;
  const tap = await createTap(sandboxId, uid, log);
  try {
    const policy = spec.egress ?? (internet ? undefined : { allow: [], deny: ["0.0.0.0/0"] });
    if (policy) await applyPolicy(tap.name, sandboxId, policy, log);
    else await ensureTable(log).catch((err: Error) => log.warn({ err: err.message }, "no NAT for sandbox networks: the VM may not reach the internet"));
  } catch (err) {
    await releaseDevice(tap.name, sandboxId);
    throw err;
  }
  return tap;
}
