// Creates through a fleet API replica: what a create needs of its node (its
// template's image, its snapshot's node, the node its volumes are on, its
// memory), the best node for that from the store's records with this
// replica's own recent placements counted in, and the create sent there
// (the next node when one turns out full). A full fleet is a 429 with
// Retry-After; a fleet with no ready node a 503.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import type { NodeRecord } from "../domain/node.js";
import { DEFAULT_SANDBOX_SHAPE } from "../domain/sandbox.js";
import type { Store } from "../store/store.js";
import { DEFAULT_TAG, parseTemplateRef } from "../templates/names.js";
import { PendingPlacements, place, type PlacementAsk } from "./placement.js";
import { sendError, type Json } from "./respond.js";
import type { NodeAnswer } from "./workspace-routes.js";

/** How long this replica counts a create it placed before the store has its record (it writes it as the start begins). */
const IN_FLIGHT_MS = 2_000;
/** Bodies of creates are read here (to place them): E2B's are small JSON. */
const CREATE_BODY_MAX = 1 << 20;
/** Default memory of a create whose template says none (the nodes' default). */
/** A built-in template's sandbox (a node's defaults). */
const DEFAULT_SHAPE = { memoryMB: DEFAULT_SANDBOX_SHAPE.memoryMB, cpuCount: DEFAULT_SANDBOX_SHAPE.cpuCount };

/** What creating uses of the replica (api-server.ts). */
export interface CreateDeps {
  store: Store;
  log: Logger;
  readNodes(fresh?: boolean): Promise<NodeRecord[]>;
  live(n: NodeRecord): boolean;
  /** The node templates are built on (the first ready one by name). */
  templateNode(): Promise<NodeRecord | undefined>;
  /** One request to a node with a body of the replica's; the whole answer. */
  call(n: NodeRecord, req: IncomingMessage, path: string, body?: Buffer): Promise<NodeAnswer>;
  /** A sandbox now runs on `node` (the replica keeps where each sandbox is). */
  placed(node: string, sandboxId: string): void;
}

export class FleetCreates {
  private readonly pending = new PendingPlacements();

  constructor(private readonly d: CreateDeps) {}

  /** A request's body, refused past CREATE_BODY_MAX. */
  readBody(req: IncomingMessage): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on("data", (c: Buffer) => {
        size += c.length;
        if (size > CREATE_BODY_MAX) {
          reject(new Error(`request body over ${CREATE_BODY_MAX} bytes`));
          req.destroy();
        } else chunks.push(c);
      });
      req.on("end", () => resolve(Buffer.concat(chunks)));
      req.on("error", reject);
    });
  }

  /** The live node a volume's disk is on (a record without a node: the first ready one, as on one box). */
  async volumeNode(name: string | undefined): Promise<NodeRecord | undefined> {
    return name === undefined ? this.d.templateNode() : (await this.d.readNodes()).find((n) => n.name === name && this.d.live(n));
  }

  /** What a create needs of its node: the template's image (when only nodes that built it have it), its snapshot's node, its memory. */
  async ask(raw: string): Promise<PlacementAsk> {
    const { store } = this.d;
    const ref = parseTemplateRef(raw);
    if ("problem" in ref) return { ...DEFAULT_SHAPE };
    const t = (await store.templateByName(ref.base)) ?? (await store.getTemplate(ref.base));
    if (t) {
      const tag = await store.getTemplateTag(t.id, ref.tag ?? DEFAULT_TAG);
      const build = tag ? await store.getTemplateBuild(tag.buildId) : undefined;
      return { memoryMB: t.memoryMB, cpuCount: t.cpuCount, ...(build?.result ? { image: build.result.image } : {}) };
    }
    const snap = (await store.listSnapshots()).find((s) => s.id === ref.base || s.name === ref.base);
    if (snap) return { memoryMB: snap.memoryMB, cpuCount: snap.cpuCount, ...(snap.node !== undefined ? { node: snap.node } : {}) };
    return { ...DEFAULT_SHAPE }; // a built-in template: every node builds it
  }

  /** The nodes that may take `ask`, best first, the first counted as taking it (the Connect API's creates). */
  async place(ask: PlacementAsk): Promise<ReturnType<typeof place>> {
    const placement = place(this.pending.apply(await this.nodesForPlacement(), Date.now() - IN_FLIGHT_MS), ask);
    if (placement.ok) this.pending.note(placement.nodes[0]!.name, ask);
    return placement;
  }

  /** The least loaded ready node, for what is not a sandbox (a new volume's disk). */
  async leastLoaded(): Promise<NodeRecord | { problem: string }> {
    const placement = place(await this.nodesForPlacement(), { memoryMB: 0, cpuCount: 0 });
    return placement.ok ? placement.nodes[0]! : { problem: placement.message };
  }

  /** POST /sandboxes: placed by its template, snapshot and volumes, sent to that node, its answer sent back. */
  async create(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body: Buffer;
    try {
      body = await this.readBody(req);
    } catch (err) {
      return sendError(res, 413, (err as Error).message);
    }
    let parsed: Json = {};
    try {
      parsed = body.length ? (JSON.parse(body.toString("utf8")) as Json) : {};
    } catch {
      // the node answers a malformed body with its own 400
    }
    const ask = await this.ask(typeof parsed.templateID === "string" ? parsed.templateID : "base");
    const pin = await this.volumesPin(parsed.volumeMounts);
    if ("problem" in pin) return sendError(res, 400, pin.problem);
    if (pin.node !== undefined) {
      if (ask.node !== undefined && ask.node !== pin.node) return sendError(res, 400, `this sandbox's snapshot is on node '${ask.node}' and its volumes on '${pin.node}': they must be on one node`);
      ask.node = pin.node;
    }
    return this.send(req, res, body, ask, (b) => (JSON.parse(b.toString("utf8")) as { sandboxID?: string }).sandboxID);
  }

  /** Sends a create to the best node for `ask` (the next when one is full after all) and its answer back. */
  async send(req: IncomingMessage, res: ServerResponse, body: Buffer, ask: PlacementAsk, idOf: (answer: Buffer) => string | undefined): Promise<void> {
    const placement = place(this.pending.apply(await this.nodesForPlacement(), Date.now() - IN_FLIGHT_MS), ask);
    if (!placement.ok) return sendError(res, placement.why === "full" ? 429 : 503, placement.message, placement.why === "full" ? { "retry-after": "5" } : {});
    // The best node first; one that is full after all (its last heartbeat was behind) passes it on to the next.
    let last: NodeAnswer | undefined;
    for (const n of placement.nodes.slice(0, 3)) {
      this.pending.note(n.name, ask); // counted while it starts: concurrent creates go elsewhere
      try {
        last = await this.d.call(n, req, req.url ?? "/sandboxes", body);
      } catch (err) {
        this.d.log.warn({ err, node: n.name }, "a node did not answer a create: trying the next");
        continue;
      }
      if (last.status !== 429 && last.status !== 503) {
        if (last.status < 300) {
          const id = idOf(last.body);
          if (id) this.d.placed(n.name, id);
          this.d.log.info({ sandboxId: id, node: n.name }, "sandbox placed");
        }
        break;
      }
    }
    if (!last) return sendError(res, 503, "no node answered the create: see the API's log");
    const headers: Record<string, string> = { "content-type": String(last.headers["content-type"] ?? "application/json") };
    if (last.headers["retry-after"]) headers["retry-after"] = String(last.headers["retry-after"]);
    res.writeHead(last.status, { ...headers, "content-length": last.body.length }).end(last.body);
  }

  /**
   * The nodes for a placement: as their heartbeats said, with their sandboxes
   * and memory counted afresh from the store (every replica's creates are
   * there as soon as they start; a heartbeat may be seconds old).
   */
  private async nodesForPlacement(): Promise<NodeRecord[]> {
    const [all, loads] = await Promise.all([this.d.readNodes(true), this.d.store.nodeLoads()]);
    const byNode = new Map(loads.map((l) => [l.node, l]));
    return all.map((n) => {
      const l = byNode.get(n.name) ?? { sandboxes: 0, memoryMB: 0, cpus: 0 };
      return { ...n, capacity: { ...n.capacity, sandboxes: l.sandboxes, memoryMB: l.memoryMB, cpus: l.cpus } };
    });
  }

  /** The node the volumes a create mounts are on (all on one), or an error message. */
  private async volumesPin(mounts: unknown): Promise<{ node?: string } | { problem: string }> {
    if (!Array.isArray(mounts) || !mounts.length) return {};
    const nodes = new Set<string>();
    for (const m of mounts) {
      const name = (m as { name?: unknown } | null)?.name;
      if (typeof name !== "string") continue; // the node answers a bad mount with its own 400
      const v = await this.d.store.volumeByName(name);
      if (v?.node !== undefined) nodes.add(v.node);
    }
    if (nodes.size > 1) return { problem: `the volumes this sandbox mounts are on different nodes (${[...nodes].join(", ")}): a sandbox can mount volumes of one node only` };
    return nodes.size ? { node: [...nodes][0]! } : {};
  }
}
