// Does a host name lead to an address? Asked of the name servers the
// sandboxes use (dns.ts: LOCALE2B_DNS, else the host's), so the proxy and the
// sandbox see the same answers. Answers are kept for their TTL (at most a
// minute); an address not in a kept answer is asked again before the name is
// disbelieved, so a name whose addresses changed since is still followed.
import { Resolver } from "node:dns/promises";
import { nameServers } from "../dns.js";

const MAX_TTL_MS = 60_000;
const cache = new Map<string, { addresses: Set<string>; until: number }>();

function resolver(): Resolver {
  const r = new Resolver({ timeout: 3000, tries: 2 });
  const servers = nameServers();
  if (servers.length) r.setServers(servers);
  return r;
}

async function lookup(name: string): Promise<Set<string>> {
  try {
    const answers = await resolver().resolve4(name, { ttl: true });
    const ttl = Math.min(MAX_TTL_MS, Math.max(0, ...answers.map((a) => a.ttl)) * 1000);
    const addresses = new Set(answers.map((a) => a.address));
    cache.set(name, { addresses, until: Date.now() + ttl });
    if (cache.size > 4096) cache.delete(cache.keys().next().value!);
    return addresses;
  } catch {
    return new Set(); // no such name, or no answer: it leads nowhere
  }
}

export async function resolvesTo(name: string, address: string): Promise<boolean> {
  const n = name.toLowerCase().replace(/\.$/, "");
  const kept = cache.get(n);
  if (kept && kept.until > Date.now() && kept.addresses.has(address)) return true;
  return (await lookup(n)).has(address);
}
