// What no sandbox may reach, whatever its egress policy: the server's own
// infrastructure on a network a sandbox could otherwise route to (its
// Postgres, the Kubernetes API of the cluster it runs in, operators' own
// LOCALE2B_SANDBOX_DENY ranges). The host itself is barred already (the nft
// input chain); these are other machines. Looked up at start and every
// minute (an apiserver or a database may move), written to the nft set the
// sandboxes' forward rules reject (runtimes/net/nft.ts).
import { lookup } from "node:dns/promises";
import type { Logger } from "pino";
import { setInfrastructure } from "../runtimes/net/nft.js";
import { apiserverAddresses, type InCluster } from "./kubernetes-client.js";

const REFRESH_MS = 60_000;

/** The host of a postgresql:// URL when it is reached over TCP (not a Unix socket directory). */
export function databaseHost(url: string): string | undefined {
  try {
    const u = new URL(url);
    const viaQuery = u.searchParams.get("host");
    const host = viaQuery ?? decodeURIComponent(u.hostname);
    if (!host || host.startsWith("/")) return undefined;
    return host.replace(/^\[|\]$/g, "");
  } catch {
    return undefined;
  }
}

/** `a, b/24, ...` as a list of IPv4 addresses and CIDRs; anything else is refused with a message naming `variable`. */
export function parseAddressList(raw: string | undefined, variable = "LOCALE2B_SANDBOX_DENY"): string[] {
  if (!raw?.trim()) return [];
  return raw.split(",").map((x) => x.trim()).filter(Boolean).map((x) => {
    const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/.exec(x);
    if (!m || m.slice(1, 5).some((o) => Number(o) > 255) || (m[5] !== undefined && Number(m[5]) > 32)) {
      throw new Error(`${variable}: '${x}' is not an IPv4 address or CIDR (e.g. 10.20.0.0/16)`);
    }
    return x;
  });
}

export interface InfrastructureOptions {
  databaseUrl?: string;
  cluster?: InCluster;
  deny: string[];
  log: Logger;
}

/** Keeps the nft set of barred addresses up to date until stopped. */
export class InfrastructureGuard {
  private timer: NodeJS.Timeout | undefined;
  private last = "";

  constructor(private readonly o: InfrastructureOptions) {}

  /** Every address now (a lookup that fails is logged and left out this time). */
  async addresses(): Promise<string[]> {
    const out = [...this.o.deny];
    const host = this.o.databaseUrl ? databaseHost(this.o.databaseUrl) : undefined;
    if (host) {
      try {
        for (const a of await lookup(host, { all: true, family: 4 })) out.push(a.address);
      } catch (err) {
        this.o.log.warn({ err, host }, "cannot resolve the database's host: sandboxes are not barred from it until it resolves");
      }
    }
    if (this.o.cluster) {
      try {
        out.push(...(await apiserverAddresses(this.o.cluster)));
      } catch (err) {
        this.o.log.warn({ err }, "cannot read the Kubernetes API's endpoints: sandboxes are barred from its Service address only");
        out.push(new URL(this.o.cluster.server).hostname);
      }
    }
    return [...new Set(out)].filter((a) => !a.startsWith("127."));
  }

  async refresh(): Promise<void> {
    const list = await this.addresses();
    const key = list.join(",");
    if (key === this.last) return;
    await setInfrastructure(list, this.o.log);
    this.last = key;
    this.o.log.info({ addresses: list }, "sandboxes are barred from the server's infrastructure");
  }

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh().catch((err: unknown) => this.o.log.warn({ err }, "updating the addresses sandboxes are barred from failed")), REFRESH_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
