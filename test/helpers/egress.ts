import { spawnSync } from "node:child_process";
import { networkInterfaces } from "node:os";

/** The host's first non-loopback IPv4 address that is not a sandbox network's (l2b*): a destination egress tests can use without internet. */
export function uplinkAddress(): string | undefined {
  for (const [name, addrs] of Object.entries(networkInterfaces())) {
    if (name.startsWith("l2b")) continue;
    const a = addrs?.find((x) => x.family === "IPv4" && !x.internal);
    if (a) return a.address;
  }
  return undefined;
}

/** A sandbox's egress chain as `nft list` prints it, or undefined when it does not exist. */
export function nftChain(chain: string): string | undefined {
  const r = spawnSync("nft", ["list", "chain", "inet", "locale2b", chain], { encoding: "utf8" });
  return r.status === 0 ? r.stdout : undefined;
}

export const haveNft = (): boolean => spawnSync("nft", ["--version"]).status === 0;
