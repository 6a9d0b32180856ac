// The name servers a sandbox with its own network resolves with: the host's,
// as long as a sandbox can reach them (a loopback resolver such as
// systemd-resolved's 127.0.0.53 is not reachable from another network
// namespace: its upstream servers are used instead).
import { readFileSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { setting } from "../../settings.js";

function serversIn(path: string): string[] {
  try {
    return readFileSync(path, "utf8")
      .split("\n")
      .map((l) => /^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(l)?.[1])
      .filter((a): a is string => a !== undefined);
  } catch {
    return [];
  }
}

/** IPv4 name servers for sandboxes: LOCALE2B_DNS (comma-separated), else the host's non-loopback ones. */
export function nameServers(env: NodeJS.ProcessEnv = process.env): string[] {
  const explicit = setting("LOCALE2B_DNS", env);
  if (explicit) return explicit.split(",").map((s) => s.trim()).filter(Boolean);
  const usable = (list: string[]) => list.filter((a) => !a.startsWith("127."));
  const direct = usable(serversIn("/etc/resolv.conf"));
  if (direct.length) return direct;
  // systemd-resolved keeps the upstream servers here.
  return usable(serversIn("/run/systemd/resolve/resolv.conf"));
}

/** The addresses among `servers` that belong to this host (a sandbox reaches them as input, not forwarded). */
export function hostLocalAddresses(servers: string[]): string[] {
  const mine = new Set<string>();
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) if (a.family === "IPv4") mine.add(a.address);
  return servers.filter((s) => mine.has(s));
}
