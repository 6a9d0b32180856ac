// Host-side network devices for sandboxes: each gets a /30 of NET_BASE on a
// host device named `l2b<short id>` (a Firecracker tap, or the host end of a
// process sandbox's veth pair), the host at .1 and the sandbox at .2. Which
// /30s are taken is read from the host's l2b* devices, so runtimes and
// restarts share the pool without a registry.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { findExecutable } from "../../host/checks.js";

export const run = promisify(execFile);

/** The address range sandboxes' /30s come from (16384 sandboxes). */
export const NET_BASE = "10.201.0.0/16";
const [A, B] = [10, 201];
const SLOTS = 16_384;

/** Indexes being set up in this process (not yet visible in `ip addr`). */
const reserved = new Set<number>();

export function ipBin(): string {
  const ip = findExecutable("ip");
  if (!ip) throw new Error("cannot give the sandbox a network: the 'ip' command (iproute2) is missing");
  return ip;
}

/** `l2b` + the last 12 characters of the id: fits Linux's 15-byte interface names. */
export function deviceName(sandboxId: string): string {
  return `l2b${sandboxId.slice(-12)}`;
}

export function addresses(index: number): { host: string; guest: string; netmask: string; prefix: number } {
  const base = index * 4;
  const c = base >> 8;
  const d = base & 255;
  return { host: `${A}.${B}.${c}.${d + 1}`, guest: `${A}.${B}.${c}.${d + 2}`, netmask: "255.255.255.252", prefix: 30 };
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

/** Runs `ip` (or `prefix… ip`, e.g. nsenter into a namespace) with an error that says what failed. */
export async function ip(args: string[], prefix: string[] = []): Promise<void> {
  const [file, ...rest] = [...prefix, ipBin(), ...args];
  try {
    await run(file!, rest);
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    throw new Error(`ip ${args.join(" ")} failed: ${why}${/permitted|denied/i.test(why) ? " (network devices need root or CAP_NET_ADMIN)" : ""}`);
  }
}

/**
 * Runs `setUp` with a free /30 index held for it (so concurrent creates do
 * not pick the same one before its device shows in `ip addr`).
 */
export async function withFreeIndex<T>(setUp: (index: number) => Promise<T>): Promise<T> {
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
  try {
    return await setUp(index);
  } finally {
    reserved.delete(index);
  }
}

/** Removes a network device; one that is already gone is fine. */
export async function deleteDevice(name: string): Promise<void> {
  await run(ipBin(), ["link", "del", name]).catch(() => undefined);
}
