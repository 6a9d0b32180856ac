// Host-side network devices for sandboxes: each gets a /30 of NET_BASE on a
// host device named `l2b<short id>` (a Firecracker tap, or the host end of a
// process sandbox's veth pair), the host at .1 and the sandbox at .2. Which
// /30s are taken is read from the host's l2b* devices, so runtimes and
// restarts share the pool without a registry.
import { mkdirSync, rmdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCommand } from "../../host/commands.js";
import { findExecutable } from "../../host/executables.js";

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
  const { stdout } = await runCommand(ipBin(), ["-o", "-4", "addr", "show"]);
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
    await runCommand(file!, rest);
  } catch (err) {
    const why = ((err as { stderr?: string }).stderr ?? (err as Error).message).trim();
    throw new Error(`ip ${args.join(" ")} failed: ${why}${/permitted|denied/i.test(why) ? " (network devices need root or CAP_NET_ADMIN)" : ""}`);
  }
}

/** Index locks shared by every server process on this host: a directory per index being set up. */
const LOCKS = process.getuid?.() === 0 ? "/run/locale2b-net" : join(tmpdir(), `locale2b-net-${process.getuid?.()}`);
/** A lock older than this was left by a process that died mid-setup. */
const STALE_LOCK_MS = 30_000;

/** Takes the lock directory `dir` (mkdir is atomic across processes), reclaiming a stale one. */
function tryLock(dir: string): boolean {
  try {
    mkdirSync(dir);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  }
  try {
    if (Date.now() - statSync(dir).mtimeMs > STALE_LOCK_MS) {
      rmdirSync(dir);
      mkdirSync(dir);
      return true;
    }
  } catch {
    // someone else took or freed it meanwhile
  }
  return false;
}

/** Runs `fn` holding a named lock shared by every server process on this host. */
export async function withHostLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
  mkdirSync(LOCKS, { recursive: true, mode: 0o700 });
  const dir = join(LOCKS, `${name}.lock`);
  for (let i = 0; !tryLock(dir); i++) await new Promise((r) => setTimeout(r, Math.min(100, 5 * (i + 1))));
  try {
    return await fn();
  } finally {
    unlock(dir);
  }
}

function unlock(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // already gone
  }
}

/**
 * Runs `setUp` with a free /30 index held for it, so that concurrent creates
 * (in this process, or in another server on this host) never pick the same
 * one before its device shows in `ip addr`.
 */
export async function withFreeIndex<T>(setUp: (index: number) => Promise<T>): Promise<T> {
  mkdirSync(LOCKS, { recursive: true, mode: 0o700 });
  let used = await usedIndexes();
  for (let attempt = 0; attempt < 3; attempt++) {
    for (let i = 0; i < SLOTS; i++) {
      if (used.has(i) || reserved.has(i) || !tryLock(join(LOCKS, String(i)))) continue;
      reserved.add(i);
      try {
        // Another process may have finished setting this index up since we looked.
        if ((await usedIndexes()).has(i)) continue;
        return await setUp(i);
      } finally {
        reserved.delete(i);
        unlock(join(LOCKS, String(i)));
      }
    }
    used = await usedIndexes();
  }
  throw new Error(`no free address left in ${NET_BASE} for a sandbox network`);
}

/** Removes a network device; one that is already gone is fine. */
export async function deleteDevice(name: string): Promise<void> {
  await runCommand(ipBin(), ["link", "del", name]).catch(() => undefined);
}
