// Network for sandboxes created with allowInternetAccess: one tap device per
// VM (`l2b<short id>`) with a /30 of NET_BASE, the host at .1 and the guest
// at .2 (the guest kernel configures eth0 from the `ip=` boot argument).
// Egress to the internet needs the host to forward and masquerade NET_BASE
// (scripts/setup-host does it); finer egress policy is not implemented.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { promisify } from "node:util";
import type { Logger } from "pino";
import { findTool } from "./host.js";
import type { TapRecord } from "./state.js";

const run = promisify(execFile);

/** The address range sandboxes' /30s come from (16384 sandboxes). */
export const NET_BASE = "10.201.0.0/16";
const [A, B] = [10, 201];
const SLOTS = 16_384;
/** The DNS server the `ip=` boot argument names (the guest's init copies /proc/net/pnp to resolv.conf). */
const DEFAULT_DNS = "1.1.1.1";

/** Indexes being set up in this process (not yet visible in `ip addr`). */
const reserved = new Set<number>();

function ipBin(): string {
  const ip = findTool("ip");
  if (!ip) throw new Error("cannot give the sandbox a network: the 'ip' command (iproute2) is missing");
  return ip;
}

/** `l2b` + the last 12 characters of the id: fits Linux's 15-byte interface names. */
export function tapName(sandboxId: string): string {
  return `l2b${sandboxId.slice(-12)}`;
}

/** A stable, locally administered unicast MAC for the guest's eth0. */
export function guestMac(sandboxId: string): string {
  const h = createHash("sha256").update(sandboxId).digest();
  return ["06", "00", ...[0, 1, 2, 3].map((i) => h[i]!.toString(16).padStart(2, "0"))].join(":");
}

export function addresses(index: number): { host: string; guest: string; netmask: string; prefix: number } {
  const base = index * 4;
  const c = base >> 8;
  const d = base & 255;
  return { host: `${A}.${B}.${c}.${d + 1}`, guest: `${A}.${B}.${c}.${d + 2}`, netmask: "255.255.255.252", prefix: 30 };
}

/** The kernel's `ip=<client>:<server>:<gw>:<netmask>:<hostname>:<device>:<autoconf>:<dns0>` boot argument. */
export function ipBootArg(index: number, dns = process.env.LOCALE2B_FIRECRACKER_DNS || DEFAULT_DNS): string {
  const a = addresses(index);
  return `ip=${a.guest}::${a.host}:${a.netmask}::eth0:off:${dns}`;
}

/** /30 indexes the host's l2b* devices already use. */
async function usedIndexes(): Promise<Set<number>> {
  const used = new Set<number>();
  const { stdout } = await run(ipBin(), ["-o", "-4", "addr", "show"]);
  for (const line of stdout.split("\n")) {
    const m = /^\d+:\s+(\S+)\s+inet\s+(\d+)\.(\d+)\.(\d+)\.(\d+)\//.exec(line);
    if (!m || !m[1]!.startsWith("l2b") || Number(m[2]) !== A || Number(m[3]) !== B) continue;
    used.add((Number(m[4]) * 256 + Number(m[5])) >> 2);
  }
  return used;
}

async function ip(args: string[]): Promise<void> {
  try {
    await run(ipBin(), args);
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    throw new Error(`ip ${args.join(" ")} failed: ${why}${/permitted|denied/i.test(why) ? " (tap devices need root or CAP_NET_ADMIN)" : ""}`);
  }
}

/** Creates the tap device with its /30 (owned by `uid` when the VMM runs as that user under the jailer). */
async function setUp(rec: TapRecord, uid: number | undefined): Promise<void> {
  if (!existsSync("/dev/net/tun")) throw new Error("cannot give the sandbox a network: /dev/net/tun is missing");
  const a = addresses(rec.index);
  await ip(["tuntap", "add", "dev", rec.name, "mode", "tap", ...(uid !== undefined ? ["user", String(uid)] : [])]);
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
  const used = await usedIndexes();
  let index = -1;
  for (let i = 0; i < SLOTS; i++) {
    if (!used.has(i) && !reserved.has(i)) {
      index = i;
      break;
    }
  }
  if (index < 0) throw new Error(`no free address left in ${NET_BASE} for a sandbox network`);
  reserved.add(index);
  const rec: TapRecord = { name: tapName(sandboxId), index, guestMac: guestMac(sandboxId) };
  try {
    await setUp(rec, uid);
  } finally {
    reserved.delete(index);
  }
  log.debug({ tap: rec.name, ...addresses(index) }, "tap device created");
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
  await run(ipBin(), ["link", "del", name]).catch(() => undefined);
}
