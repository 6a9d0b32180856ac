// The private and shared address space a sandbox never reaches, whatever its
// allowOut, unless the operator opens part of it (LOCALE2B_SANDBOX_ALLOW_PRIVATE):
// a host's LAN, its cloud VPC, a CGNAT or Tailscale network. These are where a
// team's own services live (databases, admin panels, other hosts), so code
// in a sandbox must not be able to call them. E2B bars the same ranges.
// Loopback, link-local (cloud metadata), multicast and the sandboxes' own
// range are barred separately (nft.ts, sandbox-proxy.ts): no setting opens them.
import net from "node:net";

/** RFC 1918 and RFC 6598 (shared address space). */
export const PRIVATE_RANGES = ["10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16"] as const;

/** IPv4 CIDRs (or addresses) as a BlockList. */
export function blockListOf(cidrs: readonly string[]): net.BlockList {
  const list = new net.BlockList();
  for (const c of cidrs) {
    const [base, bits] = c.split("/");
    list.addSubnet(base!, Number(bits ?? 32), "ipv4");
  }
  return list;
}

const PRIVATE = blockListOf(PRIVATE_RANGES);
let opened: { cidrs: readonly string[]; list: net.BlockList } = { cidrs: [], list: blockListOf([]) };

/**
 * The parts of the private ranges this server's sandboxes may reach
 * (LOCALE2B_SANDBOX_ALLOW_PRIVATE; each sandbox's allowOut and denyOut still
 * apply), e.g. an internal package mirror. Set at start, before any sandbox's
 * rules are written: a sandbox's nft chain holds the list it was given.
 */
export function setOpenedPrivate(cidrs: readonly string[]): void {
  opened = { cidrs: [...cidrs], list: blockListOf(cidrs) };
}

export function openedPrivate(): readonly string[] {
  return opened.cidrs;
}

/** Whether `address` is private space no sandbox of this server may reach. */
export function barredPrivate(address: string): boolean {
  return PRIVATE.check(address, "ipv4") && !opened.list.check(address, "ipv4");
}
