// The workspace API (under /workspace) through a fleet API replica: a
// sandbox's routes go to its node; a create to the node of its workspace's
// sandbox, or the placed one; lists, the event stream and the audit export
// from every live node.
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { Logger } from "pino";
import { apiKeyFromHeaders, MISSING_KEY_MESSAGE } from "../api/auth.js";
import type { NodeRecord } from "../domain/node.js";
import type { Store } from "../store/store.js";
import { WORKSPACE_METADATA } from "../workspace/metadata.js";
import type { PlacementAsk } from "./placement.js";
import { sendJson, type Json } from "./respond.js";

/** A node's whole answer to one request of the replica's. */
export interface NodeAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** What the workspace routes use of the replica (api-server.ts). */
export interface FleetRouting {
  store: Store;
  log: Logger;
  readNodes(fresh?: boolean): Promise<NodeRecord[]>;
  live(n: NodeRecord): boolean;
  locate(sandboxId: string): Promise<{ node: NodeRecord | undefined; name: string } | undefined>;
  lostMessage(sandboxId: string, name: string, n: NodeRecord | undefined): string;
  /** The request as it came, to node `n`. */
  forward(req: IncomingMessage, res: ServerResponse, n: NodeRecord, sandboxId?: string): void;
  /** One request to a node with a body of the replica's; the whole answer. */
  call(n: NodeRecord, req: IncomingMessage, path: string, body?: Buffer): Promise<NodeAnswer>;
  readBody(req: IncomingMessage): Promise<Buffer>;
  createAsk(template: string): Promise<PlacementAsk>;
  placeCreate(req: IncomingMessage, res: ServerResponse, body: Buffer, ask: PlacementAsk, idOf: (answer: Buffer) => string | undefined): Promise<void>;
  agentFor(n: NodeRecord): http.Agent;
  nodeHeaders(req: IncomingMessage): http.OutgoingHttpHeaders;
}

export function workspaceRoutes(f: FleetRouting): (req: IncomingMessage, res: ServerResponse, sub: string) => Promise<void> {
  const { store, log, readNodes, live, locate, lostMessage, forward, call, readBody, createAsk, placeCreate, agentFor, nodeHeaders } = f;

  /** A workspace API error, in its own shape (api/workspace/errors.ts). */
  const wsError = (res: ServerResponse, status: number, code: string, message: string) => sendJson(res, status, { error: code, message, detail: message, status });

  /** The same request to every live node, each answer's body streamed to `res` in turn (NDJSON: whole lines per node). */
  const concatenate = async (req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(200, { "content-type": "application/x-ndjson; charset=utf-8", "cache-control": "no-store" });
    for (const n of (await readNodes()).filter(live)) {
      await new Promise<void>((resolve) => {
        const up = http.request({ agent: agentFor(n), method: "GET", path: req.url, headers: nodeHeaders(req) }, (answer) => {
          if (answer.statusCode !== 200) {
            answer.resume();
            return resolve();
          }
          answer.pipe(res, { end: false });
          answer.on("end", resolve);
          answer.on("error", () => resolve());
        });
        up.on("error", () => resolve());
        up.end();
      });
    }
    res.end();
  };

  /**
   * Server-sent events from every live node, merged event by event (never
   * half an event), until the client goes; without ids (each node numbers its
   * own): a client that must resume follows one sandbox (sandbox_id), whose
   * stream comes from its node with ids.
   */
  const mergeEvents = async (req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store", connection: "keep-alive" });
    const ups: http.ClientRequest[] = [];
    for (const n of (await readNodes()).filter(live)) {
      const up = http.request({ agent: agentFor(n), method: "GET", path: req.url, headers: nodeHeaders(req) }, (answer) => {
        let pending = "";
        answer.setEncoding("utf8").on("data", (d: string) => {
          pending += d;
          const end = pending.lastIndexOf("\n\n");
          if (end < 0) return;
          // Event ids are each node's own: a client resuming with one would skip other nodes' events, so none are passed on.
          res.write(pending.slice(0, end + 2).replace(/^id:.*\n/gm, ""));
          pending = pending.slice(end + 2);
        });
      });
      up.on("error", (err) => log.warn({ err, node: n.name }, "a node's event stream failed"));
      up.end();
      ups.push(up);
    }
    res.on("close", () => ups.forEach((u) => u.destroy()));
  };

  /**
   * The workspace API (under /workspace): a sandbox's routes go to its node;
   * a create to the node of its workspace's sandbox, or the placed one;
   * lists, the event stream and the audit export from every live node.
   */
  return async (req: IncomingMessage, res: ServerResponse, sub: string): Promise<void> => {
    if (sub === "/health" && req.method === "GET") {
      const all = (await readNodes()).filter(live);
      return sendJson(res, 200, { status: all.length ? "ok" : "degraded", version: process.env.npm_package_version ?? "0.1.0", runtime: "fleet", nodes: all.map((n) => n.name) });
    }
    if (!(await apiKeyFromHeaders(store, req.headers))) return wsError(res, 401, "unauthenticated", MISSING_KEY_MESSAGE);
    const query = new URL(req.url ?? "/", "http://api").searchParams;
    const one = /^\/sandboxes\/([^/]+)(?:\/.*)?$/.exec(sub);
    if (one) {
      const where = await locate(one[1]!);
      if (!where) return wsError(res, 404, "not_found", `sandbox '${one[1]}' not found`);
      if (!where.node || !live(where.node)) return wsError(res, 503, "unavailable", lostMessage(one[1]!, where.name, where.node));
      return forward(req, res, where.node, one[1]);
    }
    if (sub === "/sandboxes" && req.method === "POST") {
      let body: Buffer;
      try {
        body = await readBody(req);
      } catch (err) {
        return wsError(res, 413, "too_large", (err as Error).message);
      }
      let parsed: Json = {};
      try {
        parsed = body.length ? (JSON.parse(body.toString("utf8")) as Json) : {};
      } catch {
        // the node answers a malformed body with its own 400
      }
      const idOf = (b: Buffer) => (JSON.parse(b.toString("utf8")) as { sandbox_id?: string }).sandbox_id;
      // A workspace that has a sandbox: that sandbox's node resumes and returns it.
      if (typeof parsed.workspace_id === "string" && parsed.workspace_id) {
        const [rec] = await store.listSandboxes({ metadata: { [WORKSPACE_METADATA]: parsed.workspace_id } });
        const n = rec?.node !== undefined ? (await readNodes()).find((x) => x.name === rec.node) : undefined;
        if (rec && n && live(n)) {
          const a = await call(n, req, req.url ?? "/", body);
          return void res.writeHead(a.status, { "content-type": String(a.headers["content-type"] ?? "application/json"), "content-length": a.body.length }).end(a.body);
        }
      }
      const ask = await createAsk(typeof parsed.template === "string" && parsed.template !== "default" ? parsed.template : "base");
      if (typeof parsed.memory_mb === "number") ask.memoryMB = parsed.memory_mb;
      return placeCreate(req, res, body, ask, idOf);
    }
    if (sub === "/sandboxes" && req.method === "GET") {
      const answers = await Promise.all((await readNodes()).filter(live).map((n) => call(n, req, req.url ?? "/").catch(() => undefined)));
      const bad = answers.find((a) => a && a.status !== 200);
      if (bad) return void res.writeHead(bad.status, { "content-type": "application/json" }).end(bad.body);
      const all = answers.flatMap((a) => (a ? (JSON.parse(a.body.toString("utf8")) as { sandboxes: Json[] }).sandboxes : []));
      all.sort((a, b) => String(a.created_at).localeCompare(String(b.created_at)));
      return sendJson(res, 200, { sandboxes: all });
    }
    if (sub === "/events" || sub === "/events/stream" || sub === "/audit") {
      const id = query.get("sandbox_id");
      if (id) {
        const where = await locate(id);
        if (!where?.node || !live(where.node)) return wsError(res, 404, "not_found", `sandbox '${id}' not found on a live node`);
        return forward(req, res, where.node, id);
      }
      if (sub === "/events/stream") return mergeEvents(req, res);
      if (sub === "/audit") return concatenate(req, res);
      return wsError(res, 400, "invalid_request", "in a fleet, events are kept by each node: pass sandbox_id, or follow every node's with GET /workspace/events/stream");
    }
    wsError(res, 404, "not_found", `no route for ${req.method} /workspace${sub}`);
  };
}
