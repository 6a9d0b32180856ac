// A process sandbox's way out: its network namespace joined to the host by a
// veth pair on a /30 of NET_BASE (the host end `l2b<short id>`, the sandbox's
// `eth0`), NATed to the host's uplink, filtered by the nft rules on the host
// end (nft.ts), where nothing in the sandbox can change them (its root has no
// CAP_NET_ADMIN).
import { statSync } from "node:fs";
import type { Logger } from "pino";
import { runCommand } from "../../host/commands.js";
import { findExecutable } from "../../host/executables.js";
import { addresses, deviceName, ipBin, withFreeIndex } from "./addresses.js";
import { applyPolicy, disableIpv6, missingTools, releaseDevice } from "./nft.js";
import type { EgressPolicy } from "../../domain/network.js";

/** What a sandbox's network is, kept with the sandbox so it can be torn down after a restart. */
export interface NetRecord {
  device: string;
  index: number;
}

export function isNetRecord(v: unknown): v is NetRecord {
  const r = v as Partial<NetRecord> | undefined;
  return typeof r?.device === "string" && typeof r.index === "number";
}

/** What this host lacks for veth networks with rules, or undefined when it has it all. */
export function vethUnsupported(): string | undefined {
  if (process.getuid?.() !== 0) return "they need the server to run as root";
  return missingTools(["nft", "ip", "nsenter"]);
}

/** `ip -batch -` (optionally inside a namespace through nsenter), with an error that says which command failed. */
function ipBatch(commands: string[], netns?: string): Promise<void> {
  const [file, ...args] = netns ? [findExecutable("nsenter")!, `--net=${netns}`, ipBin(), "-batch", "-"] : [ipBin(), "-batch", "-"];
  return runCommand(file!, args, { input: commands.join("\n") + "\n" }).then(
    () => undefined,
    (err: { stderr?: string; message: string }) => {
      const why = (err.stderr || err.message).trim();
      throw new Error(`ip ${netns ? "(in the sandbox) " : ""}failed: ${why}${/permitted|denied/i.test(why) ? " (network devices need root)" : ""}`);
    },
  );
}

/**
 * Where a sandbox's network namespace is: a process in it (the process
 * runtime's sandbox init) or a named namespace (`ip netns add`, the gvisor
 * runtime's, made before runsc starts in it).
 */
export type NetnsTarget = number | { name: string };

/** The namespace's path, checked to be other than ours (namespaces are told apart by inode). */
function netnsOf(target: NetnsTarget): string {
  const path = typeof target === "number" ? `/proc/${target}/ns/net` : `/run/netns/${target.name}`;
  let ino: number;
  try {
    ino = statSync(path).ino;
  } catch {
    throw new Error(typeof target === "number" ? "the sandbox exited before its network was set up" : `the network namespace ${target.name} is gone`);
  }
  if (ino === statSync("/proc/self/ns/net").ino) throw new Error("the sandbox shares the host's network namespace: refusing to give it a veth");
  return path;
}

/**
 * Joins the network namespace `target` to the host with a veth pair and
 * applies `policy` (allow everything but what the table always forbids, when
 * the policy is empty). On failure nothing is left behind.
 */
export async function attachVeth(sandboxId: string, target: NetnsTarget, policy: EgressPolicy, log: Logger): Promise<NetRecord> {
  const ns = netnsOf(target);
  const nsArg = typeof target === "number" ? String(target) : target.name;
  const device = deviceName(sandboxId);
  const peer = `l2p${sandboxId.slice(-12)}`;
  return withFreeIndex(async (index) => {
    const a = addresses(index);
    try {
      await ipBatch([`link add ${device} type veth peer name ${peer} netns ${nsArg}`]);
      disableIpv6(device);
      await ipBatch([`addr add ${a.host}/${a.prefix} dev ${device}`, `link set ${device} up`]);
      await applyPolicy(device, sandboxId, policy, log, a.guest);
      await ipBatch(
        [
          `link set ${peer} name eth0`,
          `addr add ${a.guest}/${a.prefix} dev eth0`,
          `link set eth0 up`,
          `link set lo up`,
          `route add default via ${a.host}`,
        ],
        ns,
      );
    } catch (err) {
      await releaseDevice(device, sandboxId);
      throw err;
    }
    log.debug({ device, address: a.guest, allow: policy.allow, deny: policy.deny }, "sandbox network set up");
    return { device, index };
  });
}

/** Replaces a sandbox's rules (its connections keep their conntrack state). */
export async function updateVethPolicy(rec: NetRecord, sandboxId: string, policy: EgressPolicy, log: Logger): Promise<void> {
  await applyPolicy(rec.device, sandboxId, policy, log, addresses(rec.index).guest);
}
