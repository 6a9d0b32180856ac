// One sandbox's egress proxy: a listener on the host end of its network
// device (its /30's host address), the target of the nft DNAT of its outbound
// TCP (redirect-rules.ts). Each accepted connection is checked to come from
// the sandbox's own address, its original destination is looked up, its first
// bytes are read for the name it asks for, and the verdict (verdict.ts) either
// resets it at once or hands it off: to the sandbox's Interceptor when its
// name has request rules (network.rules) and leads where it goes, else to
// `passthrough`, which connects to the original destination and splices the
// bytes both ways, untouched.
import net, { type Socket } from "node:net";
import { networkInterfaces } from "node:os";
import type { Logger } from "pino";
import type { EgressPolicy } from "../../../domain/network.js";
import { NET_BASE } from "../addresses.js";
import { readFirstBytes, type FirstBytes } from "./first-bytes.js";
import { resolvesTo } from "./name-check.js";
import { originalDestination, type Destination } from "./original-destination.js";
import { reportLetOut } from "./let-out.js";
import { judge } from "./verdict.js";
import { Interceptor } from "./intercept.js";
import { interception } from "./interception.js";
import { rulesChangeRequests, rulesFor } from "./transforms.js";
import { barredPrivate } from "../private-ranges.js";

/** How long a new connection may stay silent before it is judged as naming nothing (server-speaks-first protocols). */
const FIRST_BYTES_WAIT_MS = 5000;

/** A connection allowed to go on: its client (paused), the bytes it sent first, and where it goes. */
export interface AllowedConnection {
  sandboxId: string;
  client: Socket;
  head: Buffer;
  destination: Destination;
  first: Omit<FirstBytes, "head">;
  log: Logger;
}

/** Where an allowed connection goes (a test's own, or the proxy's choice: intercepted or passed through). */
export type Handoff = (c: AllowedConnection) => void;

/** Connects to the original destination and copies bytes both ways (pipe: back-pressure, half-close). */
export const passthrough: Handoff = ({ client, head, destination, log }) => {
  const upstream = net.connect({ host: destination.address, port: destination.port, allowHalfOpen: true });
  upstream.setNoDelay(true);
  const fail = (err?: Error) => {
    if (err) log.debug({ err: err.message, destination }, "proxied connection failed");
    // A refused or failed upstream looks to the client as it would directly: a reset.
    if (!client.destroyed) client.resetAndDestroy();
    upstream.destroy();
  };
  upstream.once("error", fail);
  client.once("error", () => upstream.destroy());
  upstream.once("connect", () => {
    upstream.off("error", fail).once("error", () => (client.destroyed ? undefined : client.resetAndDestroy()));
    if (head.length) upstream.write(head);
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
  });
  client.once("close", () => upstream.destroy());
  upstream.once("close", () => client.destroy());
};

let never: { list: net.BlockList; at: number } | undefined;
let infrastructure: string[] = [];

/** The server's own infrastructure (nft's @infra set, setInfrastructure): never a proxied destination either. */
export function setProxyInfrastructure(cidrs: string[]): void {
  infrastructure = cidrs;
  never = undefined;
}

/** Addresses the proxy never connects to for a sandbox whatever it asks (nft keeps them from being redirected too); the host's own re-read every few seconds. */
function forbidden(address: string): boolean {
  if (!never || Date.now() - never.at > 5000) never = { list: neverList(), at: Date.now() };
  return never.list.check(address, "ipv4") || barredPrivate(address);
}

function neverList(): net.BlockList {
  const list = new net.BlockList();
  for (const [base, bits] of [["0.0.0.0", 8], ["127.0.0.0", 8], [NET_BASE.split("/")[0]!, Number(NET_BASE.split("/")[1])], ["169.254.0.0", 16], ["224.0.0.0", 3]] as const) {
    list.addSubnet(base, bits, "ipv4");
  }
  for (const addrs of Object.values(networkInterfaces())) for (const a of addrs ?? []) if (a.family === "IPv4") list.addAddress(a.address, "ipv4");
  for (const c of infrastructure) {
    const [base, bits] = c.split("/");
    list.addSubnet(base!, Number(bits ?? 32), "ipv4");
  }
  return list;
}

export class SandboxProxy {
  private readonly server: net.Server;
  private readonly open = new Set<Socket>();
  private policy: EgressPolicy;
  private interceptor: Interceptor | undefined;

  constructor(
    private readonly o: { sandboxId: string; host: string; guest: string; policy: EgressPolicy; log: Logger; handoff?: Handoff },
  ) {
    this.policy = o.policy;
    this.server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, (s) => void this.accept(s));
  }

  /** Listens on the host address of the sandbox's device. */
  listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once("error", (err) => reject(new Error(`the egress proxy cannot listen on ${this.o.host}:${port}: ${err.message}`)));
      this.server.listen({ host: this.o.host, port }, () => {
        this.server.removeAllListeners("error");
        this.server.on("error", (err) => this.o.log.warn({ sandboxId: this.o.sandboxId, err: err.message }, "egress proxy listener failed"));
        resolve();
      });
    });
  }

  get guest(): string {
    return this.o.guest;
  }

  get port(): number | undefined {
    return (this.server.address() as net.AddressInfo | null)?.port;
  }

  /** New connections are judged by `policy`; open ones go on as they were allowed. */
  setPolicy(policy: EgressPolicy): void {
    this.policy = policy;
  }

  /** Stops accepting; with `cutOpen`, resets the connections it carries too (the sandbox is gone). */
  async close(cutOpen: boolean): Promise<void> {
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    if (cutOpen) for (const s of this.open) s.destroy();
    // Intercepted requests in flight go on as other open connections do, unless those are cut.
    if (cutOpen) this.interceptor?.close();
    if (cutOpen) await closed;
  }

  private async accept(client: Socket): Promise<void> {
    this.open.add(client);
    client.once("close", () => this.open.delete(client));
    client.on("error", () => undefined);
    const log = this.o.log.child({ sandboxId: this.o.sandboxId });
    // Only the sandbox's own redirected traffic: nft DNATs only its address, and only to this listener.
    if (client.remoteAddress !== this.o.guest) return void client.resetAndDestroy();
    // Where it was going and what it says, looked up and read at the same time.
    const [destination, { head, ...first }] = await Promise.all([
      originalDestination(this.o.guest, client.remotePort!, this.o.host, this.port ?? -1).catch((err: Error) => {
        log.warn({ err: err.message }, "cannot find a proxied connection's destination");
        return undefined;
      }),
      readFirstBytes(client, FIRST_BYTES_WAIT_MS),
    ]);
    if (!destination || forbidden(destination.address)) {
      if (destination) log.warn({ destination }, "refused a proxied connection to a forbidden address");
      return void client.resetAndDestroy();
    }
    if (first.ended || client.destroyed) return void client.destroy();
    const verdict = await judge(this.policy, destination.address, first.name, resolvesTo);
    log.debug({ destination: `${destination.address}:${destination.port}`, kind: first.kind, name: first.name, verdict }, "egress proxy verdict");
    if (!verdict.allow) return void client.resetAndDestroy();
    reportLetOut({ sandboxId: this.o.sandboxId, destination: destination.address, port: destination.port });
    const conn = { sandboxId: this.o.sandboxId, client, head, destination, first, log };
    if (this.o.handoff) return this.o.handoff(conn);
    if (await this.intercepts(first, destination.address)) return this.interceptorFor().take(conn);
    passthrough(conn);
  }

  /**
   * Whether a connection is intercepted: HTTP(S) naming a host whose rules
   * change requests, when that name leads where the connection goes (for
   * plain HTTP the only proof that rules' values go to that host; for TLS
   * the upstream certificate is verified too).
   */
  private async intercepts(first: Omit<FirstBytes, "head">, address: string): Promise<boolean> {
    if ((first.kind !== "tls" && first.kind !== "http") || !first.name) return false;
    if (!rulesChangeRequests(rulesFor(this.policy.rules, first.name))) return false;
    return resolvesTo(first.name, address);
  }

  private interceptorFor(): Interceptor {
    this.interceptor ??= new Interceptor({ ...interception(), rulesFor: (name) => rulesFor(this.policy.rules, name) });
    return this.interceptor;
  }
}
