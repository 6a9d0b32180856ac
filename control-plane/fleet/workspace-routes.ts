// The workspace API (under /workspace) through a fleet API replica: a
// sandbox's routes go to its node; a create to the node of its workspace's
// sandbox, or the placed one; lists from every live node; events, the event
// stream and the audit export from the fleet's Postgres (history-routes.ts).
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import { apiKeyFromHeaders, MISSING_KEY_MESSAGE } from "../api/auth.js";
import type { NodeRecord } from "../domain/node.js";
import type { Store } from "../store/store.js";
import { WORKSPACE_METADATA } from "../workspace/metadata.js";
import type { FleetHistory } from "./history-routes.js";
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
  /** Events and audit entries of every node, from Postgres. */
  history: Pick<FleetHistory, "workspace" | "lostSandboxMetrics">;
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
}

export function workspaceRoutes(f: FleetRouting): (req: IncomingMessage, res: ServerResponse, sub: string) => Promise<void> {
  const { store, readNodes, live, locate, forward, call, readBody, createAsk, placeCreate, lostMessage } = f;

  /** A workspace API error, in its own shape (api/workspace/errors.ts). */
  const wsError = (res: ServerResponse, status: number, code: string, message: string) => sendJson(res, status, { error: code, message, detail: message, status });

  /**
   * The workspace API (under /workspace): a sandbox's routes go to its node;
   * a create to the node of its workspace's sandbox, or the placed one;
   * lists from every live node; events, the event stream and the audit
   * export (the whole fleet's, or one sandbox's) from Postgres.
   */
  return async (req: IncomingMessage, res: ServerResponse, sub: string): Promise<void> => {
    if (sub === "/health" && req.method === "GET") {
      const all = (await readNodes()).filter(live);
      return sendJson(res, 200, { status: all.length ? "ok" : "degraded", version: process.env.npm_package_version ?? "0.1.0", runtime: "fleet", nodes: all.map((n) => n.name) });
    }
    if (!(await apiKeyFromHeaders(store, req.headers))) return wsError(res, 401, "unauthenticated", MISSING_KEY_MESSAGE);
    const one = /^\/sandboxes\/([^/]+)(?:\/.*)?$/.exec(sub);
    if (one) {
      const where = await locate(one[1]!);
      if (!where) return wsError(res, 404, "not_found", `sandbox '${one[1]}' not found`);
      if (!where.node || !live(where.node)) {
        const why = lostMessage(one[1]!, where.name, where.node);
        // Its metrics history is in Postgres: still readable.
        if (sub === `/sandboxes/${one[1]}/metrics` && req.method === "GET") return f.history.lostSandboxMetrics(req, res, one[1]!, why);
        return wsError(res, 503, "unavailable", why);
      }
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
      // The workspace API's own default is 1 vCPU (api/workspace/sandboxes.ts).
      ask.cpuCount = typeof parsed.vcpu_count === "number" ? parsed.vcpu_count : 1;
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
    if ((sub === "/events" || sub === "/events/stream" || sub === "/audit") && req.method === "GET") return f.history.workspace(req, res, sub);
    wsError(res, 404, "not_found", `no route for ${req.method} /workspace${sub}`);
  };
}
