import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import type { Logger } from "pino";
import type { SandboxManager } from "../manager/sandbox-manager.js";
import { ipBin, NET_BASE } from "../runtimes/net/addresses.js";
import { onLetOut } from "../runtimes/net/egress-proxy/let-out.js";
import { LISTENER_PORT } from "../runtimes/net/egress-proxy/redirect-rules.js";
import { runCommand } from "../host/commands.js";
import { findExecutable } from "../host/executables.js";
import type { EventBus } from "./bus.js";

/** `[NEW] tcp 6 120 SYN_SENT src=10.201.0.2 dst=203.0.113.80 sport=48934 dport=443 [UNREPLIED] …` (the original direction first). */
const LINE = /^\s*\[NEW\]\s+(\w+)\s+\d+\s.*?\bsrc=(\S+)\s+dst=(\S+)(?:\s+sport=\d+\s+dport=(\d+))?/;
/** A direction's tuple: the original first, then the reply. */
const TUPLE = /\bsrc=(\S+)\s+dst=(\S+)\s+sport=(\d+)\s+dport=(\d+)/g;

/** How long an address no sandbox owns is not looked up again (a burst from a sandbox being killed). */
const MISS_TTL_MS = 5_000;

export interface NetworkRequest {
  protocol: string;
  source: string;
  destination: string;
  port: number | undefined;
}

/** One line of `conntrack -E -e NEW` output, or undefined when it is not a new flow. */
export function parseConntrackLine(line: string): NetworkRequest | undefined {
  const m = LINE.exec(line);
  if (!m) return undefined;
  return { protocol: m[1]!, source: m[2]!, destination: m[3]!, port: m[4] !== undefined ? Number(m[4]) : undefined };
}

/** Whether a conntrack line is a flow nft redirected to a sandbox's egress proxy (its proxy reports it, if it lets it out). */
export function isProxiedFlow(line: string): boolean {
  const [orig, reply] = [...line.matchAll(TUPLE)];
  // Redirected: the reply comes from the proxy's listener on the host, not from where the sandbox dialled.
  return !!orig && !!reply && Number(reply[3]) === LISTENER_PORT && reply[1] !== orig[2];
}

/**
 * network.request events: every new connection (TCP, UDP flow, ICMP echo) a
 * sandbox opens through its own network device (a veth or a tap, with the
 * host's rules), as the kernel's connection tracking reports it (conntrack-
 * tools' `conntrack -E -e NEW`, on the sandboxes' address range only). A
 * connection the sandbox's deny list drops never gets that far: only what
 * went out is an event; a flow redirected to the sandbox's egress proxy
 * (names in its allowOut, network.rules) is one when the proxy lets it out
 * (let-out.ts). Sandboxes on user-mode NAT or without a network
 * have none. Needs root and the `conntrack` binary (scripts/setup-host
 * installs it); without them the server says so once and runs without.
 */
export class NetworkWatch {
  private child: ChildProcess | undefined;
  private closed = false;
  /** Guest address -> sandbox id, from the host's l2b* devices. */
  private owners = new Map<string, string>();
  private misses = new Map<string, number>();
  private refreshing: Promise<void> | undefined;
  private offLetOut: (() => void) | undefined;

  constructor(
    private readonly o: {
      bus: EventBus;
      manager: SandboxManager;
      log: Logger;
      /** The conntrack binary (default: found on PATH). */
      conntrack?: string;
    },
  ) {}

  start(): void {
    // A flow redirected to an egress proxy is an event once the proxy lets it out (a refused one never went out).
    this.offLetOut = onLetOut((c) => {
      if (!this.closed) this.o.bus.publish({ event_type: "network.request", sandbox_id: c.sandboxId, protocol: "tcp", destination: c.destination, port: c.port });
    });
    if (process.getuid?.() !== 0) {
      this.o.log.info("no network.request events: reading the kernel's connection tracking needs root");
      return;
    }
    const bin = this.o.conntrack ?? findExecutable("conntrack");
    if (!bin) {
      this.o.log.info("no network.request events: install conntrack (conntrack-tools; scripts/setup-host does) to have them");
      return;
    }
    const [net, bits] = NET_BASE.split("/");
    const mask = maskOf(Number(bits));
    const child = spawn(bin, ["-E", "-e", "NEW", "--orig-src", net!, "--mask-src", mask], { stdio: ["ignore", "pipe", "pipe"] });
    this.child = child;
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    child.once("error", (err) => this.o.log.warn({ err }, "conntrack could not run: no network.request events"));
    child.once("exit", (code, signal) => {
      if (!this.closed) this.o.log.warn({ code, signal, stderr: stderr.trim() }, "conntrack exited: no more network.request events");
    });
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const req = parseConntrackLine(line);
      if (req && !isProxiedFlow(line)) void this.publish(req);
    });
  }

  private async publish(req: NetworkRequest): Promise<void> {
    const sandboxId = await this.ownerOf(req.source);
    if (!sandboxId || this.closed) return;
    this.o.bus.publish({
      event_type: "network.request",
      sandbox_id: sandboxId,
      protocol: req.protocol,
      destination: req.destination,
      ...(req.port !== undefined ? { port: req.port } : {}),
    });
  }

  /** The running sandbox whose device's guest address is `address`. */
  private async ownerOf(address: string): Promise<string | undefined> {
    const known = this.owners.get(address);
    if (known && this.o.manager.runningEndpoint(known)) return known;
    if ((this.misses.get(address) ?? 0) > Date.now()) return undefined;
    this.refreshing ??= this.refresh().finally(() => (this.refreshing = undefined));
    await this.refreshing;
    const found = this.owners.get(address);
    if (!found) this.misses.set(address, Date.now() + MISS_TTL_MS);
    return found;
  }

  /** Reads the host's l2b<last 12 of the id> devices and their /30s: the guest is the host side's address + 1. */
  private async refresh(): Promise<void> {
    let out = "";
    try {
      out = (await runCommand(ipBin(), ["-o", "-4", "addr", "show"])).stdout;
    } catch (err) {
      this.o.log.debug({ err }, "listing the host's addresses failed");
      return;
    }
    // The server stopped while `ip` ran: its store is closed.
    if (this.closed) return;
    const running = this.o.manager.list({ states: ["running"] }).map((r) => r.id);
    const owners = new Map<string, string>();
    for (const line of out.split("\n")) {
      const m = /^\d+:\s+l2b(\w{12})\s+inet\s+(\d+\.\d+\.\d+\.)(\d+)\/30/.exec(line);
      if (!m) continue;
      const id = running.find((r) => r.endsWith(m[1]!));
      if (id) owners.set(`${m[2]}${Number(m[3]) + 1}`, id);
    }
    this.owners = owners;
    this.misses.clear();
  }

  close(): void {
    this.closed = true;
    this.offLetOut?.();
    this.child?.kill("SIGTERM");
  }
}

function maskOf(bits: number): string {
  const n = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return [24, 16, 8, 0].map((s) => (n >>> s) & 255).join(".");
}
