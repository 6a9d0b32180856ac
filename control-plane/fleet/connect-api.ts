// The Connect API (locale2b.controlplane.v1: SandboxService, TemplateService)
// on a fleet's API replica: each call goes to the node it concerns, as a
// Connect call of its own with the caller's key and the node token (the node
// checks the key, as it does for REST): a create to the node placement
// picks, a sandbox's calls to its node, lists and lifecycle streams to every
// live node merged, templates to the node that builds them. Event streams of
// the event log (event_types, after_id) are read from the fleet's Postgres
// here, so their ids are the fleet's and any replica resumes them.
import { Code, ConnectError, createClient, type CallOptions, type Client, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type http from "node:http";
import type { Logger } from "pino";
import { create } from "@bufbuild/protobuf";
import { SandboxService, WatchSandboxEventsResponseSchema, type Sandbox, type WatchSandboxEventsResponse } from "../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { TemplateService } from "../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import { MISSING_KEY_MESSAGE } from "../api/auth.js";
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from "../api/connect/paging.js";
import { watchLogged } from "../api/connect/watch.js";
import type { SandboxRecord } from "../domain/sandbox.js";
import type { EventSource } from "../events/event-source.js";
import type { NodeRecord } from "../domain/node.js";
import type { PlacementAsk } from "./placement.js";
import { NODE_TOKEN_HEADER } from "./node-agent.js";

/** What the replica knows of its fleet (api-server.ts): nodes, where a sandbox is, where a create goes. */
export interface FleetView {
  token: string;
  log: Logger;
  liveNodes(): Promise<NodeRecord[]>;
  /** The sandbox's node, or a ConnectError: NotFound, or Unavailable "lost with node X". */
  nodeOf(sandboxId: string): Promise<NodeRecord>;
  /** Nodes for a create, best first, or a ConnectError (ResourceExhausted when full, Unavailable when none can). */
  placeCreate(templateId: string): Promise<{ nodes: NodeRecord[]; ask: PlacementAsk }>;
  placed(node: string, sandboxId: string): void;
  templateNode(): Promise<NodeRecord | undefined>;
  snapshotNode(snapshotId: string): Promise<NodeRecord | undefined>;
  agentFor(n: NodeRecord): http.Agent;
  /** The fleet's event log as it grows (every node's events), for WatchSandboxEvents with event_types or after_id. */
  events: EventSource;
  sandboxRecord(id: string): Promise<SandboxRecord | undefined>;
  /** Whether the request carries a valid key (calls answered here, not by a node that checks it). */
  authorized(headers: Headers): Promise<boolean>;
}

/** Headers the node needs from the caller: its key (and nothing else of the caller's). */
function forwarded(ctx: HandlerContext, token: string): CallOptions {
  const headers: Record<string, string> = { [NODE_TOKEN_HEADER]: token };
  for (const name of ["x-api-key", "authorization"]) {
    const v = ctx.requestHeader.get(name);
    if (v) headers[name] = v;
  }
  return { headers, signal: ctx.signal };
}

function ms(s: Sandbox): number {
  return s.startedAt ? Number(s.startedAt.seconds) * 1000 + Math.floor(s.startedAt.nanos / 1e6) : 0;
}

/** ListSandboxes' cursor, as a node writes it (api/connect/paging.ts): the last item's startedAt and id. */
function cursorOf(s: Sandbox): string {
  return Buffer.from(JSON.stringify({ t: ms(s), i: s.sandboxId })).toString("base64url");
}

/** Yields the items of several streams as they come; ends when all end; the first error ends it. */
async function* merge<T>(streams: AsyncIterable<T>[]): AsyncGenerator<T> {
  const its = streams.map((s) => s[Symbol.asyncIterator]());
  const next = (i: number) => its[i]!.next().then((r) => ({ i, r }));
  const waiting = new Map(its.map((_, i) => [i, next(i)]));
  try {
    while (waiting.size) {
      const { i, r } = await Promise.race(waiting.values());
      if (r.done) {
        waiting.delete(i);
        continue;
      }
      waiting.set(i, next(i));
      yield r.value;
    }
  } finally {
    await Promise.all(its.map((it) => it.return?.().catch(() => undefined)));
  }
}

export function registerFleetConnect(router: ConnectRouter, fleet: FleetView): void {
  const sandboxClients = new Map<string, Client<typeof SandboxService>>();
  const templateClients = new Map<string, Client<typeof TemplateService>>();
  const transportFor = (n: NodeRecord) => createConnectTransport({ baseUrl: n.url, httpVersion: "1.1", nodeOptions: { agent: fleet.agentFor(n) } });
  const sandboxes = (n: NodeRecord) => {
    let c = sandboxClients.get(n.url);
    if (!c) sandboxClients.set(n.url, (c = createClient(SandboxService, transportFor(n))));
    return c;
  };
  const templates = (n: NodeRecord) => {
    let c = templateClients.get(n.url);
    if (!c) templateClients.set(n.url, (c = createClient(TemplateService, transportFor(n))));
    return c;
  };
  const templateNode = async () => {
    const n = await fleet.templateNode();
    if (!n) throw new ConnectError("no node is ready to serve templates", Code.Unavailable);
    return n;
  };
  const required = (v: string, field: string) => {
    if (!v) throw new ConnectError(`${field} is required`, Code.InvalidArgument);
    return v;
  };
  /** A call about one sandbox, on its node. */
  const onNode = async <T>(sandboxId: string, fn: (c: Client<typeof SandboxService>) => Promise<T>) => fn(sandboxes(await fleet.nodeOf(required(sandboxId, "sandbox_id"))));

  router.service(SandboxService, {
    async createSandbox(req, ctx) {
      const { nodes } = await fleet.placeCreate(req.templateId || "base");
      let last: unknown;
      for (const n of nodes.slice(0, 3)) {
        try {
          const res = await sandboxes(n).createSandbox(req, forwarded(ctx, fleet.token));
          if (res.sandbox) fleet.placed(n.name, res.sandbox.sandboxId);
          return res;
        } catch (err) {
          last = err;
          const code = err instanceof ConnectError ? err.code : Code.Unavailable;
          if (code !== Code.ResourceExhausted && code !== Code.Unavailable) throw err; // the node's own answer (a bad template, a bad argument)
          fleet.log.warn({ err, node: n.name }, "a node did not take a create: trying the next");
        }
      }
      throw last;
    },
    getSandbox: (req, ctx) => onNode(req.sandboxId, (c) => c.getSandbox(req, forwarded(ctx, fleet.token))),
    pauseSandbox: (req, ctx) => onNode(req.sandboxId, (c) => c.pauseSandbox(req, forwarded(ctx, fleet.token))),
    resumeSandbox: (req, ctx) => onNode(req.sandboxId, (c) => c.resumeSandbox(req, forwarded(ctx, fleet.token))),
    killSandbox: (req, ctx) => onNode(req.sandboxId, (c) => c.killSandbox(req, forwarded(ctx, fleet.token))),
    setSandboxTimeout: (req, ctx) => onNode(req.sandboxId, (c) => c.setSandboxTimeout(req, forwarded(ctx, fleet.token))),
    createSnapshot: (req, ctx) => onNode(req.sandboxId, (c) => c.createSnapshot(req, forwarded(ctx, fleet.token))),
    forkSandbox: (req, ctx) => onNode(req.sandboxId, (c) => c.forkSandbox(req, forwarded(ctx, fleet.token))),

    async listSandboxes(req, ctx) {
      const size = req.limit === 0 ? DEFAULT_PAGE_SIZE : Math.min(req.limit, MAX_PAGE_SIZE);
      const answers = await Promise.all((await fleet.liveNodes()).map((n) => sandboxes(n).listSandboxes(req, forwarded(ctx, fleet.token))));
      const all = answers.flatMap((a) => a.sandboxes).sort((a, b) => ms(a) - ms(b) || (a.sandboxId < b.sandboxId ? -1 : a.sandboxId > b.sandboxId ? 1 : 0));
      const items = all.slice(0, size);
      const more = all.length > size || answers.some((a) => a.nextPageToken !== "");
      return { sandboxes: items, nextPageToken: more && items.length ? cursorOf(items[items.length - 1]!) : "" };
    },

    async *watchSandboxEvents(req, ctx): AsyncGenerator<WatchSandboxEventsResponse> {
      if (req.eventTypes.length || req.afterId !== undefined) {
        if (!(await fleet.authorized(ctx.requestHeader))) throw new ConnectError(MISSING_KEY_MESSAGE, Code.Unauthenticated);
        for await (const e of watchLogged(fleet.events, req, ctx, (id) => fleet.sandboxRecord(id))) yield create(WatchSandboxEventsResponseSchema, e);
        return;
      }
      const nodes = req.sandboxId ? [await fleet.nodeOf(req.sandboxId)] : await fleet.liveNodes();
      yield* merge(nodes.map((n) => sandboxes(n).watchSandboxEvents(req, forwarded(ctx, fleet.token))));
    },

    // Snapshot records are shared: any node lists them; one's files are on the node that took it.
    listSnapshots: async (req, ctx) => sandboxes(await templateNode()).listSnapshots(req, forwarded(ctx, fleet.token)),
    async deleteSnapshot(req, ctx) {
      const n = (await fleet.snapshotNode(required(req.snapshotId, "snapshot_id"))) ?? (await templateNode());
      return sandboxes(n).deleteSnapshot(req, forwarded(ctx, fleet.token));
    },
  });

  // Templates: built on, and served by, one node; their records are shared.
  router.service(TemplateService, {
    requestBuild: async (req, ctx) => templates(await templateNode()).requestBuild(req, forwarded(ctx, fleet.token)),
    getFileUploadUrl: async (req, ctx) => templates(await templateNode()).getFileUploadUrl(req, forwarded(ctx, fleet.token)),
    startBuild: async (req, ctx) => templates(await templateNode()).startBuild(req, forwarded(ctx, fleet.token)),
    getBuildStatus: async (req, ctx) => templates(await templateNode()).getBuildStatus(req, forwarded(ctx, fleet.token)),
    async *watchBuild(req, ctx) {
      yield* templates(await templateNode()).watchBuild(req, forwarded(ctx, fleet.token));
    },
    listTemplates: async (req, ctx) => templates(await templateNode()).listTemplates(req, forwarded(ctx, fleet.token)),
    getTemplate: async (req, ctx) => templates(await templateNode()).getTemplate(req, forwarded(ctx, fleet.token)),
    updateTemplate: async (req, ctx) => templates(await templateNode()).updateTemplate(req, forwarded(ctx, fleet.token)),
    deleteTemplate: async (req, ctx) => templates(await templateNode()).deleteTemplate(req, forwarded(ctx, fleet.token)),
    assignTags: async (req, ctx) => templates(await templateNode()).assignTags(req, forwarded(ctx, fleet.token)),
    deleteTags: async (req, ctx) => templates(await templateNode()).deleteTags(req, forwarded(ctx, fleet.token)),
    listTags: async (req, ctx) => templates(await templateNode()).listTags(req, forwarded(ctx, fleet.token)),
    templateExists: async (req, ctx) => templates(await templateNode()).templateExists(req, forwarded(ctx, fleet.token)),
  });
}
