// `locale2b api`: a fleet's stateless API replica. It holds no sandbox: it
// checks the caller's key against the shared store, places creates on a
// node, lists across nodes, and sends every request about one sandbox (the
// E2B REST routes under /sandboxes/{id}, and all envd traffic: the SDKs'
// routing headers, `<port>-<id>.<domain>` hosts, signed file URLs) to the
// node that runs it, over one hop, the node token added. Any replica serves
// any sandbox.
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import net from "node:net";
import type { Duplex } from "node:stream";
import type { Logger } from "pino";
import { H1H2cServer } from "../../envd/server/h1-h2c-server.js";
import { listenerFor, parseListen } from "../../envd/server/listen.js";
import { applyCors } from "../../envd/server/cors.js";
import { apiKeyFromHeaders, MISSING_KEY_MESSAGE } from "../api/auth.js";
import { sandboxForSignedUrl, SIGNED_URL_STATES } from "../api/proxy/auth.js";
import { forwardHttp1 } from "../api/proxy/forward-http1.js";
import { isConnectPath, SANDBOX_NOT_FOUND, sendProxyError } from "../api/proxy/http.js";
import { requestTarget } from "../api/proxy/target.js";
import { refuseUpgrade, tunnelUpgrade } from "../api/proxy/upgrade.js";
import { NODE_LOST_MS, type NodeRecord } from "../domain/node.js";
import { ControlPlaneMetrics } from "../metrics/metrics.js";
import type { Store } from "../store/store.js";
import { dropHeader, NODE_TOKEN_HEADER } from "./node-agent.js";
import type { KubernetesNodes } from "./kubernetes-nodes.js";
import { sendError, sendJson, type Json } from "./respond.js";
import { workspaceRoutes } from "./workspace-routes.js";
import { FleetCreates } from "./create-routes.js";
import { fleetHistory } from "./history-routes.js";
import type { ActivityHistory } from "../store/activity-history.js";
import { registerFleetConnect, type FleetView } from "./connect-api.js";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectAdapter } from "../../envd/server/connect-adapter.js";
import { registerReflection } from "../../envd/server/reflection.js";
import { SandboxService } from "../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { TemplateService } from "../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import { SecretService } from "../secrets/secret-service.js";
import type { KeySource } from "../secrets/secret-key.js";
import { isSecretsPath, secretsApi } from "./secrets-api.js";

export interface FleetApiOptions {
  host: string;
  port: number;
  store: Store;
  /** Events, audit entries and metrics history: every node's, in the fleet's Postgres. */
  history: ActivityHistory;
  /** The node token: every request to a node carries it. */
  nodeToken: string;
  /** `<port>-<id>.<domain>` hosts (the nodes' --domain must be the same). */
  domain?: string;
  /** In a Kubernetes pod: nodes' liveness from their Leases, creates only on Ready, uncordoned Nodes. */
  kubernetes?: KubernetesNodes;
  /** The secrets key (LOCALE2B_SECRETS_KEY: the nodes' too); /secrets is served here, from the store. */
  secretsKey: KeySource;
  log: Logger;
}

export interface RunningFleetApi {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** How long the node list read from the store is used before it is read again. */
const NODES_TTL_MS = 2_000;
/** One keep-alive connection pool per node. */
class NodeAgent extends http.Agent {
  constructor(private readonly target: URL) {
    super({ keepAlive: true, keepAliveMsecs: 30_000, maxSockets: 512, maxFreeSockets: 64, scheduling: "lifo" });
  }

  override createConnection(_o: http.ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): Duplex | null | undefined {
    const socket = net.connect(Number(this.target.port || 80), this.target.hostname);
    socket.setNoDelay(true);
    socket.once("connect", () => callback?.(null, socket));
    socket.once("error", (err) => callback?.(err, undefined as unknown as Duplex));
    return undefined;
  }
}

export async function startFleetApi(o: FleetApiOptions): Promise<RunningFleetApi> {
  const { store, log } = o;
  const metrics = new ControlPlaneMetrics();
  const secrets = secretsApi(new SecretService({ store, key: o.secretsKey, log: log.child({ component: "secrets" }) }), log);
  const hostSuffix = `.${(o.domain ?? "localhost").replace(/:\d+$/, "").toLowerCase()}`;
  const token = [NODE_TOKEN_HEADER, o.nodeToken];
  const agents = new Map<string, NodeAgent>();
  const agentFor = (n: NodeRecord): NodeAgent => {
    let a = agents.get(n.url);
    if (!a) {
      a = new NodeAgent(new URL(n.url));
      agents.set(n.url, a);
    }
    return a;
  };

  // The nodes, as the store had them at most NODES_TTL_MS ago, with this replica's own placements since counted in.
  let nodes: NodeRecord[] = [];
  let nodesAt = 0;
  /** The records as this replica judges them (Kubernetes' Leases and Nodes when it runs in a cluster). */
  const judged = (records: NodeRecord[]): NodeRecord[] => (o.kubernetes ? o.kubernetes.view(records) : records);
  const readNodes = async (fresh = false): Promise<NodeRecord[]> => {
    if (fresh || Date.now() - nodesAt > NODES_TTL_MS) {
      nodes = judged(await store.listNodes());
      nodesAt = Date.now();
    }
    return nodes;
  };
  const live = (n: NodeRecord) => Date.now() - n.heartbeatAt <= NODE_LOST_MS;

  // A sandbox never moves: its node, once read, is kept (a bounded map).
  const nodeOfSandbox = new Map<string, string>();
  /** The node a sandbox runs on; undefined when the store knows no such (live) sandbox. */
  const locate = async (sandboxId: string): Promise<{ node: NodeRecord | undefined; name: string } | undefined> => {
    let name = nodeOfSandbox.get(sandboxId);
    if (name === undefined) {
      const rec = await store.getSandbox(sandboxId);
      if (!rec || rec.state === "killed" || rec.node === undefined) return undefined;
      name = rec.node;
      if (nodeOfSandbox.size > 100_000) nodeOfSandbox.clear();
      nodeOfSandbox.set(sandboxId, name);
    }
    const all = await readNodes();
    const known = all.find((n) => n.name === name) ?? (await store.getNode(name));
    return { node: known && judged([known])[0], name };
  };
  /** Templates and snapshots: their records are shared; builds run on, and template files go to, one node (the first ready one by name). */
  const templateNode = async (): Promise<NodeRecord | undefined> => (await readNodes()).filter((n) => live(n) && n.state === "ready")[0];
  const lostMessage = (sandboxId: string, name: string, n: NodeRecord | undefined) =>
    `sandbox ${sandboxId} was lost with node '${name}': ${n ? `${o.kubernetes?.silence() ?? "no heartbeat"} for ${Math.round((Date.now() - n.heartbeatAt) / 1000)} s` : "the node is not in the fleet any more"}`;

  /** A whole request sent to a node as it came (bodies streamed both ways). */
  const forward = (req: IncomingMessage, res: ServerResponse, n: NodeRecord, sandboxId?: string) => {
    const host = req.headers.host ?? (req.headers[":authority"] as string | undefined);
    forwardHttp1(req, res, sandboxId ?? "-", agentFor(n), metrics, {
      ...(req.headers.host === undefined && host ? { host } : {}),
      extraHeaders: [...token, "x-forwarded-host", host ?? "", "x-forwarded-proto", "http"],
      describe: (err) => `node '${n.name}' (${n.url}) does not answer (${err.code ?? err.message})${sandboxId ? `: sandbox ${sandboxId} runs there` : ""}`,
    });
  };

  /** One request to a node with a body of ours; the answer in full (lists, creates: small JSON). */
  const call = (n: NodeRecord, req: IncomingMessage, path: string, body?: Buffer): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> =>
    new Promise((resolve, reject) => {
      const headers: http.OutgoingHttpHeaders = {
        ...nodeHeaders(req),
        "x-forwarded-host": req.headers.host ?? "",
        ...(req.headers["user-agent"] ? { "user-agent": req.headers["user-agent"] } : {}),
        ...(body ? { "content-type": "application/json", "content-length": body.length } : {}),
      };
      const r = http.request({ agent: agentFor(n), method: req.method, path, headers }, (up) => {
        const chunks: Buffer[] = [];
        up.on("data", (c: Buffer) => chunks.push(c));
        up.on("end", () => resolve({ status: up.statusCode ?? 502, headers: up.headers, body: Buffer.concat(chunks) }));
        up.on("error", reject);
      });
      r.on("error", reject);
      r.end(body);
    });

  const creates = new FleetCreates({ store, log, readNodes, live, templateNode, call, placed: (node, id) => void nodeOfSandbox.set(id, node) });

  /** GET /sandboxes and /v2/sandboxes: every live node's answer, merged in the order one node would give (paged by the same cursor). */
  const list = async (req: IncomingMessage, res: ServerResponse, v2: boolean) => {
    const url = new URL(req.url ?? "/", "http://api");
    const limit = Number(url.searchParams.get("limit") ?? 100);
    const desc = (url.searchParams.get("order") ?? "desc") !== "asc";
    const targets = (await readNodes()).filter(live);
    type Answer = { status: number; headers: http.IncomingHttpHeaders; body: Buffer };
    const answers: Answer[] = await Promise.all(targets.map((n) => call(n, req, req.url ?? "/sandboxes").catch((err: Error): Answer => ({ status: 502, headers: {}, body: Buffer.from(JSON.stringify({ message: `node '${n.name}': ${err.message}` })) }))));
    const failed = answers.find((a) => a.status !== 200);
    if (failed && failed.status < 500) return void res.writeHead(failed.status, { "content-type": "application/json" }).end(failed.body);
    const items = answers.filter((a) => a.status === 200).flatMap((a) => JSON.parse(a.body.toString("utf8")) as Json[]);
    const key = (s: Json) => ({ startedAt: Date.parse(String(s.startedAt)), id: String(s.sandboxID) });
    const asc = (a: Json, b: Json) => {
      const x = key(a);
      const y = key(b);
      return x.startedAt - y.startedAt || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0);
    };
    items.sort((a, b) => (desc ? -asc(a, b) : asc(a, b)));
    if (!v2) return sendJson(res, 200, items);
    const page = items.slice(0, limit);
    const headers: Record<string, string> = {};
    const more = items.length > limit || answers.some((a) => a.headers["x-next-token"]);
    if (more && page.length) {
      const k = key(page[page.length - 1]!);
      headers["x-next-token"] = Buffer.from(`${k.startedAt}:${k.id}`).toString("base64url");
    }
    const running = answers.map((a) => Number(a.headers["x-total-running"] ?? NaN)).filter((x) => !Number.isNaN(x));
    if (running.length) headers["x-total-running"] = String(running.reduce((s, x) => s + x, 0));
    if (failed) headers["x-locale2b-partial"] = "a node did not answer: its sandboxes are missing from this list";
    sendJson(res, 200, page, headers);
  };

  const sandboxRequest = async (req: IncomingMessage, res: ServerResponse, sandboxId: string, proxy: boolean) => {
    const where = await locate(sandboxId);
    if (!where) {
      if (proxy) return sendProxyError(res, 502, SANDBOX_NOT_FOUND, isConnectPath(req.url), sandboxId);
      return sendError(res, 404, `sandbox '${sandboxId}' not found`);
    }
    if (!where.node || !live(where.node)) {
      const message = lostMessage(sandboxId, where.name, where.node);
      return proxy ? sendProxyError(res, 502, message, isConnectPath(req.url), sandboxId) : sendError(res, 503, message);
    }
    forward(req, res, where.node, sandboxId);
  };

  /** The headers a fan-out request to a node carries: the caller's key and the node token. */
  const nodeHeaders = (req: IncomingMessage): http.OutgoingHttpHeaders => ({
    [NODE_TOKEN_HEADER]: o.nodeToken,
    host: req.headers.host ?? "localhost",
    ...(req.headers["x-api-key"] ? { "x-api-key": req.headers["x-api-key"] } : {}),
    ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
  });

  const history = fleetHistory({ store, history: o.history, log, readNodes, live, forward, call });
  const workspace = workspaceRoutes({ store, history, readNodes, live, locate, lostMessage, forward, call, readBody: (req) => creates.readBody(req), createAsk: (t) => creates.ask(t), placeCreate: (...a) => creates.send(...a) });

  const rest = async (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0]!;
    if (path === "/workspace" || path.startsWith("/workspace/")) return workspace(req, res, path.slice("/workspace".length) || "/");
    // A volume's file API authenticates with the volume's token (checked by its node): sent to the node its disk is on.
    const content = /^\/volumecontent\/([^/]+)(?:\/|$)/.exec(path);
    if (content) {
      const v = await store.getVolume(decodeURIComponent(content[1]!));
      const n = v ? await creates.volumeNode(v.node) : undefined;
      if (!v) return sendError(res, 404, `volume '${content[1]}' not found`);
      if (!n) return sendError(res, 503, `volume '${v.name}' is on node '${v.node}', which is not live`);
      return forward(req, res, n);
    }
    // Signed template-file uploads authenticate themselves (their URL); every other route needs a key.
    const upload = req.method === "PUT" && /^\/templates\/[^/]+\/files\/[^/]+$/.test(path);
    if (!upload && !(await apiKeyFromHeaders(store, req.headers))) return sendError(res, 401, MISSING_KEY_MESSAGE);
    if (isSecretsPath(path)) return secrets(req, res);
    const vol = /^\/volumes(?:\/([^/]+))?$/.exec(path);
    if (vol) {
      if (!vol[1] && req.method === "POST") {
        // A new volume's disk goes to the least loaded ready node; sandboxes that mount it are placed there.
        const n = await creates.leastLoaded();
        return "problem" in n ? sendError(res, 503, n.problem) : forward(req, res, n);
      }
      const key = vol[1] ? decodeURIComponent(vol[1]) : undefined;
      const v = key ? ((await store.getVolume(key)) ?? (await store.volumeByName(key))) : undefined;
      const n = v ? await creates.volumeNode(v.node) : await templateNode();
      if (!n) return sendError(res, 503, v ? `volume '${v.name}' is on node '${v.node}', which is not live` : "no node is ready");
      return forward(req, res, n);
    }
    const m = /^\/(?:v2\/)?sandboxes(?:\/([^/]+))?(\/.*)?$/.exec(path);
    if (m) {
      const [, id, rest] = m;
      if (!id) {
        if (req.method === "POST") return creates.create(req, res);
        if (req.method === "GET") return list(req, res, path.startsWith("/v2/"));
      } else if (id === "metrics" && !rest && req.method === "GET") {
        return history.manyMetrics(req, res);
      } else if (rest === "/metrics" && req.method === "GET") {
        return history.sandboxMetrics(req, res, id);
      } else {
        return sandboxRequest(req, res, id, false);
      }
    }
    if (/^\/(?:v[23]\/)?templates(\/|$)/.test(path) || path === "/snapshots") {
      const n = await templateNode();
      if (!n) return sendError(res, 503, "no node is ready to serve templates and snapshots");
      return forward(req, res, n);
    }
    sendError(res, 404, `no route for ${req.method} ${path}`);
  };

  const view: FleetView = {
    token: o.nodeToken,
    log,
    liveNodes: async () => (await readNodes()).filter(live),
    async nodeOf(sandboxId) {
      const where = await locate(sandboxId);
      if (!where) throw new ConnectError(`sandbox '${sandboxId}' not found`, Code.NotFound);
      if (!where.node || !live(where.node)) throw new ConnectError(lostMessage(sandboxId, where.name, where.node), Code.Unavailable);
      return where.node;
    },
    async placeCreate(templateId) {
      const ask = await creates.ask(templateId);
      const placement = await creates.place(ask);
      if (!placement.ok) throw new ConnectError(placement.message, placement.why === "full" ? Code.ResourceExhausted : Code.Unavailable);
      return { nodes: placement.nodes, ask };
    },
    placed: (node, sandboxId) => void nodeOfSandbox.set(sandboxId, node),
    templateNode,
    async snapshotNode(snapshotId) {
      const snap = (await store.listSnapshots()).find((x) => x.id === snapshotId || x.name === snapshotId);
      return snap?.node !== undefined ? (await readNodes()).find((n) => n.name === snap.node && live(n)) : undefined;
    },
    agentFor,
    events: history.feed,
    sandboxRecord: (id) => store.getSandbox(id),
    authorized: async (headers) => (await apiKeyFromHeaders(store, headers)) !== undefined,
  };
  const rpc = connectAdapter({
    jsonOptions: { ignoreUnknownFields: true },
    routes(router) {
      registerFleetConnect(router, view);
      registerReflection(router, [SandboxService.file, TemplateService.file]);
    },
    fallback: (req, res) => void rest(req as IncomingMessage, res as ServerResponse).catch((err: unknown) => {
      log.error({ err, url: req.url }, "fleet API request failed");
      if (!res.headersSent) sendError(res as ServerResponse, 502, `the fleet API failed: ${(err as Error).message}`);
    }),
  });

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    dropHeader(req, NODE_TOKEN_HEADER); // a client's own is never passed on
    const t = requestTarget(req, hostSuffix);
    const fail = (err: unknown) => {
      log.error({ err, url: req.url }, "fleet API request failed");
      if (!res.headersSent) sendError(res, 502, `the fleet API failed: ${(err as Error).message}`);
      else res.destroy();
    };
    if (t) {
      // envd traffic: the node's own proxy checks the sandbox's tokens.
      void (async () => {
        let id = t.sandboxId;
        if (id === undefined) {
          id = sandboxForSignedUrl(await store.listSandboxes({ states: SIGNED_URL_STATES }), req);
          if (!id) return sendProxyError(res, 401, "invalid signature: it matches no running sandbox's file URL", false);
        }
        await sandboxRequest(req, res, id, true);
      })().catch(fail);
      return;
    }
    if (applyCors(req, res)) return;
    if (req.url === "/health") return void res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
    if (req.method === "GET" && req.url === "/metrics") {
      return void res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(metrics.render({}, []));
    }
    rpc(req, res);
  };

  const upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): boolean => {
    dropHeader(req, NODE_TOKEN_HEADER);
    const t = requestTarget(req, hostSuffix);
    if (!t?.sandboxId) return false;
    const id = t.sandboxId;
    void locate(id)
      .then((where) => {
        if (!where) return refuseUpgrade(socket, 502, SANDBOX_NOT_FOUND, id);
        if (!where.node || !live(where.node)) return refuseUpgrade(socket, 502, lostMessage(id, where.name, where.node), id);
        const target = new URL(where.node.url);
        const upstream = net.connect(Number(target.port || 80), target.hostname);
        tunnelUpgrade(req, socket, head, upstream, metrics, undefined, token);
      })
      .catch(() => refuseUpgrade(socket, 502, "the fleet API failed to route the upgrade", id));
    return true;
  };

  const server = new H1H2cServer((req, res) => handle(req as IncomingMessage, res as ServerResponse), upgrade);
  const listener = listenerFor(parseListen(`tcp://${o.host}:${o.port}`));
  const address = await listener.listen((socket) => server.accept(socket));
  const port = Number(address.slice(address.lastIndexOf(":") + 1));
  const url = `http://${o.host.includes(":") ? `[${o.host}]` : o.host}:${port}`;
  log.info({ url, nodes: (await readNodes(true)).map((n) => n.name) }, "fleet API listening");
  return {
    url,
    port,
    async close() {
      const closed = listener.close();
      server.close();
      await closed;
      for (const a of agents.values()) a.destroy();
      history.close();
      metrics.close();
    },
  };
}
