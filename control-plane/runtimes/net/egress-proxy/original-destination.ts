// Where a redirected connection was going. The sandbox's TCP is DNATed to its
// own proxy listener (proxy-rules.ts), so the accepted socket's local address
// is the listener's; the original destination is in the kernel's connection
// tracking entry, keyed by the sandbox's address and source port (unique while
// the connection lives). Node has no SO_ORIGINAL_DST (getsockopt) and no
// IP_TRANSPARENT for a TPROXY listener, and a native addon would need a
// compiler on every host; conntrack's own table is the one sound source left.
// Fast path: one `conntrack -E` per server streams the new connections DNATed
// to a proxy listener (a netlink event each, before the proxy can accept the
// connection), kept here by source address and port until asked for. Slow
// path (no tool, or an event not seen in time: netlink drops events under
// load): the whole table, read from /proc/net/nf_conntrack where the kernel
// has it, else `conntrack -L`; lookups that arrive together share one read.
import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { createInterface } from "node:readline";
import { runCommand } from "../../../host/commands.js";
import { findExecutable } from "../../../host/executables.js";

export interface Destination {
  address: string;
  port: number;
}

const PROC = "/proc/net/nf_conntrack";

/** Why this host cannot tell a redirected connection's destination, or undefined when it can. */
export async function originalDestinationUnsupported(): Promise<string | undefined> {
  if (await readFile(PROC).then(() => true, () => false)) return undefined;
  if (findExecutable("conntrack")) return undefined;
  return `the host has neither ${PROC} nor the conntrack tool (install conntrack) to find a proxied connection's destination`;
}

let pending: Promise<string> | undefined;

/** The conntrack table as text (one read for the lookups waiting on it). */
function table(): Promise<string> {
  pending ??= (async () => {
    try {
      return await readFile(PROC, "latin1");
    } catch {
      const bin = findExecutable("conntrack");
      if (!bin) throw new Error(`cannot read ${PROC} and there is no conntrack tool`);
      return (await runCommand(bin, ["-L", "-p", "tcp"])).stdout;
    }
  })().finally(() => {
    pending = undefined;
  });
  return pending;
}

/** How long an accepted connection waits for its conntrack event before the table is read. */
const EVENT_WAIT_MS = 300;
/**
 * An event no connection asked for within this long is dropped (the connection never reached the
 * proxy); so is an event arriving this long after its connection gave up waiting for it. Kept short:
 * a kept event is keyed by address and port only, and a later connection may reuse both.
 */
const EVENT_KEEP_MS = 10_000;
const ORIG = /src=(\d+\.\d+\.\d+\.\d+) dst=(\d+\.\d+\.\d+\.\d+) sport=(\d+) dport=(\d+)/;

/**
 * The `conntrack -E` events of redirected connections, matched to the
 * connections the proxy accepts, by the sandbox's address and source port.
 * A key names one connection only while it lives, so nothing stale may
 * answer for a later one: an event arriving after its connection stopped
 * waiting (and read the table) is dropped, events expire after
 * EVENT_KEEP_MS, and a sandbox's events go with it (its address may be
 * given to the next sandbox).
 */
export class RedirectEvents {
  private readonly seen = new Map<string, { destination: Destination; at: number }>();
  private readonly waiting = new Map<string, (d: Destination) => void>();
  /** Keys whose connection stopped waiting: their late event is not kept. */
  private readonly late = new Map<string, number>();
  /** The sandbox addresses whose proxies are in this process: other servers' redirects are not kept. */
  private readonly ours = new Set<string>();

  follow(address: string, on: boolean): void {
    if (on) return void this.ours.add(address);
    this.ours.delete(address);
    const prefix = `${address}:`;
    for (const map of [this.seen, this.late]) for (const k of map.keys()) if (k.startsWith(prefix)) map.delete(k);
  }

  /** One line of `conntrack -E` output. */
  line(line: string, now = Date.now()): void {
    const m = ORIG.exec(line);
    if (!m || !this.ours.has(m[1]!)) return;
    const key = `${m[1]}:${m[3]}`;
    const destination = { address: m[2]!, port: Number(m[4]) };
    const waiter = this.waiting.get(key);
    if (waiter) return void (this.waiting.delete(key), waiter(destination));
    this.prune(now);
    if (this.late.delete(key)) return;
    this.seen.set(key, { destination, at: now });
  }

  /** The destination of the connection from `key` (address:port), waiting up to `waitMs` for its event. */
  take(key: string, waitMs = EVENT_WAIT_MS, now = Date.now()): Promise<Destination | undefined> {
    const kept = this.seen.get(key);
    this.seen.delete(key);
    if (kept && now - kept.at <= EVENT_KEEP_MS) return Promise.resolve(kept.destination);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(key);
        this.late.set(key, Date.now());
        resolve(undefined);
      }, waitMs);
      this.waiting.set(key, (d) => (clearTimeout(timer), resolve(d)));
    });
  }

  clear(): void {
    this.seen.clear();
    this.late.clear();
    this.ours.clear();
  }

  private prune(now: number): void {
    for (const map of [this.seen, this.late]) {
      for (const [k, v] of map) if (now - (typeof v === "number" ? v : v.at) > EVENT_KEEP_MS) map.delete(k);
    }
  }
}

let events: ChildProcess | undefined;
let eventsFailed = false;
const redirects = new RedirectEvents();

export function followSource(address: string, on: boolean): void {
  redirects.follow(address, on);
}

/** Starts following new connections DNATed to `listenerPort` (once per process); without the tool, nothing. */
export function watchRedirects(listenerPort: number): void {
  if (events || eventsFailed) return;
  const bin = findExecutable("conntrack");
  if (!bin) return void (eventsFailed = true);
  const child = spawn(bin, ["-E", "-e", "NEW", "-p", "tcp", "--reply-port-src", String(listenerPort)], { stdio: ["ignore", "pipe", "ignore"] });
  events = child;
  child.once("error", () => (eventsFailed = true));
  child.once("exit", () => {
    if (events === child) events = undefined;
  });
  child.unref();
  (child.stdout as NodeJS.ReadableStream & { unref?: () => void }).unref?.();
  createInterface({ input: child.stdout! }).on("line", (line) => redirects.line(line));
}

/** Stops following (server shutdown). */
export function stopWatchingRedirects(): void {
  events?.kill();
  events = undefined;
  redirects.clear();
}

/** The destination the event stream saw for `source`:`sourcePort`, waiting briefly for it; undefined when it did not come. */
function fromEvents(source: string, sourcePort: number): Promise<Destination | undefined> {
  if (!events) return Promise.resolve(undefined);
  return redirects.take(`${source}:${sourcePort}`);
}

/**
 * The destination the connection from `source`:`sourcePort` asked for before
 * it was DNATed to `listener`:`listenerPort`; undefined when no such entry is
 * there (the connection is gone).
 */
export async function originalDestination(source: string, sourcePort: number, listener: string, listenerPort: number): Promise<Destination | undefined> {
  return (await fromEvents(source, sourcePort)) ?? fromTable(source, sourcePort, listener, listenerPort);
}

async function fromTable(source: string, sourcePort: number, listener: string, listenerPort: number): Promise<Destination | undefined> {
  const text = await table();
  const orig = ` src=${source} dst=`;
  const reply = ` src=${listener} dst=${source} sport=${listenerPort} dport=${sourcePort} `;
  let at = 0;
  for (;;) {
    at = text.indexOf(reply, at);
    if (at < 0) return undefined;
    const lineStart = text.lastIndexOf("\n", at) + 1;
    const line = text.slice(lineStart, at + reply.length);
    at += reply.length;
    const m = new RegExp(`${orig.replace(/\./g, "\\.")}(\\d+\\.\\d+\\.\\d+\\.\\d+) sport=${sourcePort} dport=(\\d+) `).exec(line);
    if (m && /\btcp\b/.test(line)) return { address: m[1]!, port: Number(m[2]) };
  }
}
