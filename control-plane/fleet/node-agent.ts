// The node side of a fleet (`locale2b node`): the heartbeat that tells API
// replicas where this host is, whether it takes creates and what it has room
// for; and the guard that lets only API replicas (they hold the node token)
// talk to it.
import { timingSafeEqual, createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { join } from "node:path";
import type { Logger } from "pino";
import { NODE_HEARTBEAT_MS, type NodeRecord } from "../domain/node.js";
import type { ManagerLimits } from "../manager/options.js";
import type { SandboxRecord } from "../domain/sandbox.js";
import type { Store } from "../store/store.js";
import { Periodic } from "./periodic.js";

/** The header an API replica sends its node token in. */
export const NODE_TOKEN_HEADER = "x-locale2b-node-token";

/** Whether `headers` carry the node token (compared in constant time). */
export function hasNodeToken(headers: IncomingHttpHeaders, token: string): boolean {
  const given = headers[NODE_TOKEN_HEADER];
  if (typeof given !== "string") return false;
  const a = createHash("sha256").update(given).digest();
  const b = createHash("sha256").update(token).digest();
  return timingSafeEqual(a, b);
}

/**
 * Removes every copy of header `name` from a request (its parsed and raw
 * headers), so a proxy never passes it on: the node token must not reach a
 * sandbox, and a client cannot send one of its own through an API replica.
 */
export function dropHeader(req: IncomingMessage, name: string): void {
  if (!(name in req.headers)) return;
  delete req.headers[name];
  const raw = req.rawHeaders;
  for (let i = raw.length - 2; i >= 0; i -= 2) if (raw[i]!.toLowerCase() === name) raw.splice(i, 2);
}

/** Whether the request carries the node token; the header is taken off either way. */
export function takeNodeToken(req: IncomingMessage, token: string): boolean {
  const ok = hasNodeToken(req.headers, token);
  dropHeader(req, NODE_TOKEN_HEADER);
  return ok;
}

/** The message a request without the node token gets from a node. */
export const NODE_ONLY_MESSAGE =
  "this is a locale2b fleet node: it serves only the fleet's API replicas (they send the node token); point clients at the API's Service instead";

/** Template images this host has (the `<key>.current` files of its image cache). */
export function localImages(imagesDir: string): string[] {
  try {
    return readdirSync(join(imagesDir, "templates"))
      .filter((n) => n.endsWith(".current"))
      .map((n) => n.slice(0, -".current".length))
      .sort();
  } catch {
    return [];
  }
}

export interface HeartbeatOptions {
  store: Store;
  name: string;
  url: string;
  runtime: string;
  limits: ManagerLimits;
  imagesDir: string;
  /** This host's live sandboxes now. */
  sandboxes: () => SandboxRecord[];
  log: Logger;
  everyMs?: number;
}

/**
 * Writes this node's record now and then every NODE_HEARTBEAT_MS; its state
 * (ready, cordoned) is the store's to keep: a cordon (`locale2b nodes
 * cordon`) is not undone by the next heartbeat.
 */
export class NodeHeartbeat {
  private readonly startedAt = Date.now();
  private readonly every: Periodic;

  constructor(private readonly o: HeartbeatOptions) {
    this.every = new Periodic(() => this.o.store.putNode(this.record()).catch((err: unknown) => this.o.log.warn({ err, node: this.o.name }, "writing the node's heartbeat failed")), o.everyMs ?? NODE_HEARTBEAT_MS);
  }

  record(): NodeRecord {
    const live = this.o.sandboxes();
    return {
      name: this.o.name,
      url: this.o.url,
      state: "ready",
      heartbeatAt: Date.now(),
      startedAt: this.startedAt,
      runtime: this.o.runtime,
      capacity: {
        maxSandboxes: this.o.limits.maxSandboxes,
        memoryBudgetMB: this.o.limits.memoryBudgetMB,
        cpuBudget: this.o.limits.cpuBudget,
        sandboxes: live.length,
        memoryMB: live.reduce((sum, r) => sum + r.memoryMB, 0),
        cpus: live.reduce((sum, r) => sum + r.cpuCount, 0),
      },
      images: localImages(this.o.imagesDir),
    };
  }

  /** One heartbeat (a failure is logged: the next one tries again). */
  beat(): Promise<void> {
    return this.every.run();
  }

  start(): Promise<void> {
    return this.every.start();
  }

  stop(): Promise<void> {
    return this.every.stop();
  }
}
