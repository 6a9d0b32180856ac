import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import type { Logger } from "pino";
import { createLogger } from "../envd/log.js";
import { connectAdapter } from "../envd/server/connect-adapter.js";
import { applyCors } from "../envd/server/cors.js";
import { H1H2cServer } from "../envd/server/h1-h2c-server.js";
import { listenerFor, parseListen } from "../envd/server/listen.js";
import { registerReflection } from "../envd/server/reflection.js";
import { SandboxService } from "../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { TemplateService } from "../gen/ts/locale2b/controlplane/v1/template_pb.js";
import { registerSandboxService } from "./api/connect/service.js";
import { registerTemplateService } from "./api/connect/templates.js";
import type { ApiDeps } from "./api/deps.js";
import { createEnvdProxy } from "./api/proxy/proxy.js";
import { createRestApi } from "./api/rest/router.js";
import { createWorkspaceApi, WORKSPACE_PREFIX } from "./api/workspace/router.js";
import { createDashboard, DASHBOARD_PREFIX } from "./api/dashboard/router.js";
import type { WorkspaceSettings } from "./api/workspace/deps.js";
import { DEFAULT_ACTIVITY, startActivity, type Activity, type ActivitySettings } from "./activity.js";
import { applyGuestIdentity } from "./runtimes/guest-identity.js";
import { EnvdRpc } from "./transport/envd-rpc.js";
import { warmUpEnvd } from "./manager/warm-up.js";
import { prepareWorkspaceDir } from "./workspace/workspace-dir.js";
import { DEFAULT_LIMITS } from "./manager/options.js";
import { SandboxManager, type ManagerLimits } from "./manager/sandbox-manager.js";
import { ControlPlaneMetrics } from "./metrics/metrics.js";
import { defaultAdmissionLimits, type AdmissionLimits } from "./manager/admission.js";
import type { Runtime } from "./runtimes/runtime.js";
import { RuntimeSet } from "./runtimes/runtime-set.js";
import { createRuntime, DEFAULT_RUNTIME } from "./runtimes/registry.js";
import { TemplateCatalog } from "./images/catalog.js";
import { imagesDir } from "./images/layout.js";
import { SqliteStore } from "./store/sqlite-store.js";
import type { Store } from "./store/store.js";
import { PgStore, redact } from "./store/pg-store.js";
import { PgActivityHistory } from "./store/pg-activity-history.js";
import { SnapshotService } from "./snapshots/snapshot-service.js";
import { EnvdClient } from "./transport/envd-client.js";
import { createTemplates, type Templates } from "./templates/wiring.js";
import { startCommandHook } from "./templates/start-command.js";
import { Transport } from "./transport/transport.js";
import { setting } from "./settings.js";
import { NODE_ONLY_MESSAGE, takeNodeToken } from "./fleet/node-agent.js";
import { startNodePresence } from "./fleet/node-presence.js";
import { inCluster } from "./fleet/kubernetes-client.js";
import { InfrastructureGuard, parseAddressList } from "./fleet/infrastructure.js";
import { setOpenedPrivate } from "./runtimes/net/private-ranges.js";
import { IMAGE_ROUTE, imagePuller, serveImage } from "./fleet/image-transfer.js";
import { refuseUpgrade } from "./api/proxy/upgrade.js";
import { loadPairs, tlsWarnings, type CertificatePair, type TlsFiles } from "./tls/certificates.js";
import { TlsFront } from "./tls/tls-front.js";
import { VolumeService } from "./volumes/volume-service.js";
import { volumeIds, volumeSizeMB } from "./volumes/volume-settings.js";
import { mountGuestVolumes } from "./volumes/guest-mounts.js";
import { SecretService } from "./secrets/secret-service.js";
import { keySource } from "./secrets/secret-key.js";
import { resolveSecretPlaceholders } from "./secrets/placeholders.js";
import { TEAM } from "./domain/secret.js";
import { DEFAULT_SANDBOX_SHAPE } from "./domain/sandbox.js";
import { configureInterception, interception } from "./runtimes/net/egress-proxy/interception.js";
import { setSecretResolver } from "./runtimes/net/egress-proxy/transforms.js";
import { installEgressCa } from "./manager/egress-trust.js";

export interface ControlPlaneOptions {
  host: string;
  port: number;
  dataDir: string;
  runtime?: Runtime;
  /**
   * Makes another runtime by name, for templates whose definition asks for one
   * (`runtime: qemu`); without it every sandbox runs on `runtime`.
   */
  createRuntime?: (name: string) => Promise<Runtime>;
  /** Overrides which runtime a template asks for (tests); default: its built definition's `runtime:`. */
  templateRuntime?: (templateId: string) => string | undefined;
  /** The image cache templates are looked up in (default imagesDir()). */
  imagesDir?: string;
  /** Sandboxes of the default shape kept started ahead of creates (default 0). */
  warmPool?: number;
  /** Sandboxes kept started ahead of creates for each other template with a start command created lately (default 0). */
  templateWarmPool?: number;
  limits?: Partial<ManagerLimits>;
  /** Sandbox starts at once and how many may wait (default: one per CPU, 16 waiting per CPU). */
  admission?: Partial<AdmissionLimits>;
  /** `<port>-<sandboxId>.<domain>` hosts route to sandboxes. */
  domain?: string;
  /**
   * Serve TLS (HTTP/1.1 and HTTP/2 by ALPN) on the port instead of clear
   * text: certificate and key files, the first pair the default, the others
   * chosen by SNI; reloaded when the files change.
   */
  tls?: TlsFiles[];
  /** Postgres instead of the data dir's SQLite (LOCALE2B_DATABASE_URL). */
  databaseUrl?: string;
  /** This host's name in a shared store (default: the host name when databaseUrl is set). */
  nodeName?: string;
  /**
   * A fleet node (`locale2b node`): it answers only requests that carry the
   * node token (the API replicas'), and writes a heartbeat saying where API
   * replicas reach it (needs databaseUrl).
   */
  fleet?: { advertiseUrl?: string; token: string };
  /** An API key to accept (LOCALE2B_API_KEY); otherwise the first start creates one (not on a fleet node: `locale2b api` does). */
  apiKey?: string;
  /** Retention of events, audit and metrics history; session buffers (defaults: DEFAULT_ACTIVITY). */
  activity?: Partial<ActivitySettings>;
  /** The workspace API's defaults and limits (defaults: DEFAULT_WORKSPACE). */
  workspace?: Partial<WorkspaceSettings>;
  /** The built dashboard page (default: dist/dashboard; docs/dashboard.md). */
  dashboardAssetsDir?: string;
  log?: Logger;
}

export const DEFAULT_WORKSPACE: WorkspaceSettings = {
  idleTimeoutSeconds: 3600,
  jsonFileBytes: 32 * 1024 * 1024,
  execOutputBytes: 16 * 1024 * 1024,
};

export interface RunningControlPlane {
  url: string;
  /** The workspace API's base URL (LOCALE2B_BASE_URL): url + /workspace. */
  workspaceUrl: string;
  /** The web dashboard: url + /dashboard/ (docs/dashboard.md). */
  dashboardUrl: string;
  port: number;
  /** Set when this start created the first API key: it is shown once. */
  createdApiKey?: string;
  manager: SandboxManager;
  snapshots: SnapshotService;
  store: Store;
  runtime: Runtime;
  /** Events, audit log, sessions and metrics history. */
  activity: Activity;
  /** A fleet node: where it told the API replicas to reach it. */
  advertiseUrl?: string;
  notes: string[];
  /** With `tls`: what is served now (names, expiry, fingerprint). */
  certificates?: () => readonly CertificatePair[];
  close(): Promise<void>;
}

/**
 * The data dir's SQLite, or Postgres (`databaseUrl`), which several hosts
 * may share: each then claims its node name, so two servers never adopt the
 * same sandboxes.
 */
async function openStore(opts: ControlPlaneOptions, log: Logger): Promise<Store> {
  if (!opts.databaseUrl) return new SqliteStore(join(opts.dataDir, "locale2b.db"), { owner: true });
  const store = await PgStore.open(opts.databaseUrl);
  try {
    await store.claimNode(opts.nodeName ?? hostname());
  } catch (err) {
    await store.close();
    throw err;
  }
  log.info({ database: redact(opts.databaseUrl), node: opts.nodeName ?? hostname() }, "store: Postgres");
  return store;
}

/** The secret sandbox tokens derive from: made once, kept in the store (every server sharing a store agrees on it). */
async function tokenSeed(store: Store): Promise<Buffer> {
  return Buffer.from(await store.initSetting("token_seed", randomBytes(32).toString("hex")), "hex");
}

/** Starts the control plane: E2B REST, the Connect API and the envd proxy on one port. */
export async function startControlPlane(opts: ControlPlaneOptions): Promise<RunningControlPlane> {
  const log = opts.log ?? createLogger({ component: "control-plane" });
  if (opts.fleet && !opts.databaseUrl) throw new Error("a fleet node needs the fleet's Postgres (databaseUrl)");
  /** This host's name in a shared store; undefined on one box (SQLite). */
  const nodeName = opts.databaseUrl ? (opts.nodeName ?? hostname()) : undefined;
  // Bad certificate files stop the start before anything else is touched (a TlsConfigError names the file).
  const pairs = opts.tls?.length ? await loadPairs(opts.tls) : undefined;
  if (pairs) for (const warning of tlsWarnings(pairs, opts.domain)) log.warn({ component: "tls" }, warning);
  // Sandboxes never reach the server's own infrastructure (its Postgres, the Kubernetes API), allowOut or not,
  // nor private networks (a LAN, a VPC, a tailnet) but the parts the operator opens. A bad list stops the start here.
  const deny = parseAddressList(setting("LOCALE2B_SANDBOX_DENY"));
  setOpenedPrivate(parseAddressList(setting("LOCALE2B_SANDBOX_ALLOW_PRIVATE"), "LOCALE2B_SANDBOX_ALLOW_PRIVATE"));
  const store = await openStore(opts, log);
  const cluster = inCluster();
  const guard = opts.databaseUrl || cluster || deny.length ? new InfrastructureGuard({ ...(opts.databaseUrl ? { databaseUrl: opts.databaseUrl } : {}), ...(cluster ? { cluster } : {}), deny, log }) : undefined;
  await guard?.start().catch(async (err: unknown) => {
    await store.close();
    throw err;
  });
  const seed = await tokenSeed(store);
  let createdApiKey: string | undefined;
  if (opts.apiKey) await store.importApiKey(opts.apiKey, "LOCALE2B_API_KEY");
  else if (!opts.fleet && (await store.listApiKeys()).length === 0) createdApiKey = (await store.createApiKey("default")).key;

  const runtime = opts.runtime ?? (await createRuntime(DEFAULT_RUNTIME));
  const notes = await runtime.check();
  const catalog = new TemplateCatalog(opts.imagesDir ?? imagesDir());
  const runtimes = new RuntimeSet(runtime, {
    create: opts.createRuntime,
    templateRuntime: opts.templateRuntime ?? ((id) => catalog.runtimeOf(id)),
  });
  const images = opts.imagesDir ?? imagesDir();
  const transport = new Transport();
  const envdRpc = new EnvdRpc();
  // Built once the manager runs; the manager's quiesce hook reaches it.
  let activity: Activity | undefined;
  let snapshotsRef: SnapshotService | undefined;
  let managerRef: SandboxManager | undefined;
  const templates: Templates = createTemplates({
    store,
    catalog,
    runtimes,
    imagesDir: images,
    dataDir: opts.dataDir,
    seed,
    defaults: { ...DEFAULT_SANDBOX_SHAPE },
    snapshotNamed: async (name) => (await snapshotsRef?.resolve(name)) !== undefined,
    dropWarm: (image) => managerRef?.dropWarm(image) ?? Promise.resolve(),
    log: log.child({ component: "templates" }),
  });
  // A fleet node copies a template's image from another node when a create of it lands here first.
  const puller = opts.fleet ? imagePuller({ imagesDir: images, dataDir: opts.dataDir, store, self: nodeName!, token: opts.fleet.token, log }) : undefined;
  const volumes = new VolumeService({
    store,
    dataDir: opts.dataDir,
    seed,
    ...volumeIds(),
    defaultSizeMB: volumeSizeMB(),
    liveSandboxes: async () => [...(managerRef?.list() ?? []), ...(await store.listSandboxes())],
    ...(nodeName !== undefined ? { node: nodeName } : {}),
    log: log.child({ component: "volumes" }),
  });
  await volumes.start();
  const secrets = new SecretService({
    store,
    // On a shared store (Postgres) no key file is made unless named: LOCALE2B_SECRETS_KEY, the same everywhere.
    key: keySource(opts.databaseUrl ? undefined : opts.dataDir, { key: setting("LOCALE2B_SECRETS_KEY"), file: setting("LOCALE2B_SECRETS_KEY_FILE") }),
    log: log.child({ component: "secrets" }),
  });
  // network.rules: the egress proxies terminate TLS with this data dir's CA and resolve rules' placeholders per request (audited by name and version).
  const upstreamCaFile = setting("LOCALE2B_EGRESS_UPSTREAM_CA");
  configureInterception({ caDir: join(opts.dataDir, "egress-ca"), ...(upstreamCaFile ? { upstreamCaFile } : {}) });
  setSecretResolver(async (value, sandboxId) => {
    const audit = activity ? { log: activity.audit, actor: `sandbox:${sandboxId}`, sandboxId } : undefined;
    return (await resolveSecretPlaceholders(secrets, TEAM, value, audit)).value;
  });
  const manager = new SandboxManager({
    store,
    ...(nodeName !== undefined ? { node: nodeName } : {}),
    runtime,
    runtimes,
    transport,
    envd: new EnvdClient(),
    dataDir: opts.dataDir,
    seed,
    limits: { ...DEFAULT_LIMITS, ...opts.limits },
    templates: templates.service,
    startCommand: startCommandHook(envdRpc, templates.settings.readyTimeoutMs),
    defaults: { ...DEFAULT_SANDBOX_SHAPE },
    readyTimeoutMs: 30_000,
    admission: defaultAdmissionLimits(opts.admission),
    warmPool: opts.warmPool,
    templateWarmPool: opts.templateWarmPool,
    quiesce: (id) => activity?.quiesce(id) ?? Promise.resolve(),
    ...(puller ? { ensureImage: (image: string) => puller.ensure(image) } : {}),
    volumes,
    mountGuestVolumes: (target, list) => mountGuestVolumes(envdRpc, target, list),
    prepare: async (target, dir, guest) => {
      const sandboxLog = log.child({ sandboxId: target.endpoint.sandboxId });
      if (guest) await applyGuestIdentity(envdRpc, target, guest, sandboxLog);
      await prepareWorkspaceDir(envdRpc, target, dir, "user", sandboxLog);
      // No token yet: a warm sandbox, made ahead of any create (a create's own sandbox is not kept waiting for this).
      if (target.token === "") await warmUpEnvd(envdRpc, target, log);
    },
    trustEgressCa: (target) => installEgressCa(envdRpc, target, interception().ca),
    log,
  });
  managerRef = manager;
  await manager.start();
  const snapshots = new SnapshotService({ store, manager, dataDir: opts.dataDir, templates: catalog, log: log.child({ component: "snapshots" }), ...(nodeName !== undefined ? { node: nodeName } : {}) });
  await snapshots.start();
  snapshotsRef = snapshots;
  await templates.service.start();
  // On Postgres, activity history is the fleet's (any replica reads every node's, a lost node's stays).
  const history = opts.databaseUrl ? PgActivityHistory.open(opts.databaseUrl, log.child({ component: "activity" })) : undefined;
  // A fleet node leaves the shared history's pruning to the API replicas (one retention for the fleet).
  activity = await startActivity({ manager, rpc: envdRpc, dataDir: opts.dataDir, settings: { ...DEFAULT_ACTIVITY, ...opts.activity }, log, ...(history ? { history } : {}), prune: !opts.fleet });
  const metrics = new ControlPlaneMetrics(manager.events);
  const domain = opts.domain ?? "localhost";
  // publicDomain needs the port we listen on: set once it is known, before any request.
  const deps: ApiDeps = {
    manager,
    snapshots,
    templates: templates.service,
    templateFiles: templates.files,
    store,
    metrics,
    log,
    domain: domain.replace(/:\d+$/, ""),
    publicDomain: domain,
    events: activity.bus,
    audit: activity.audit,
    history: activity.history,
    volumes,
    secrets,
  };

  const fleet = opts.fleet;
  const proxy = createEnvdProxy(deps);
  const rest = createRestApi(deps);
  const workspace = createWorkspaceApi({
    manager,
    store,
    rpc: envdRpc,
    ...activity,
    settings: { ...DEFAULT_WORKSPACE, ...opts.workspace },
    runtime: runtime.name,
    version: process.env.npm_package_version ?? "0.1.0",
    log,
  });
  // The web dashboard: its page, cookie sessions, and a gateway to the E2B REST and workspace APIs (not on a fleet node: clients never reach one).
  const dashboard = fleet
    ? undefined
    : createDashboard({
        store,
        audit: activity.audit,
        rest,
        workspace: (req, res) => workspace.handle(req, res),
        log,
        ...(opts.dashboardAssetsDir ? { assetsDir: opts.dashboardAssetsDir } : {}),
      });
  const rpc = connectAdapter({
    jsonOptions: { ignoreUnknownFields: true },
    routes(router) {
      registerSandboxService(router, deps);
      registerTemplateService(router, deps);
      registerReflection(router, [SandboxService.file, TemplateService.file]);
    },
    fallback: (req, res) => void rest(req as IncomingMessage, res as ServerResponse),
  });

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    if (fleet && !takeNodeToken(req, fleet.token) && req.url !== "/health") {
      res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify({ code: 401, message: NODE_ONLY_MESSAGE }));
      return;
    }
    if (fleet && req.method === "GET" && req.url?.startsWith(IMAGE_ROUTE)) return serveImage(images, req, res, log);
    if (proxy.matches(req)) return proxy.handle(req, res);
    // Before CORS: the dashboard answers its own page only, never another site's scripts.
    if (dashboard?.matches(req)) return dashboard.handle(req, res);
    if (applyCors(req, res)) return;
    if (workspace.matches(req)) return workspace.handle(req, res);
    if (req.url === "/health") {
      res.writeHead(200, { "content-type": "text/plain" }).end("ok\n");
      return;
    }
    if (req.method === "GET" && req.url === "/metrics") {
      const states: Record<string, number> = {};
      for (const s of manager.list({ states: ["creating", "running", "pausing", "paused", "resuming"] })) {
        states[s.state] = (states[s.state] ?? 0) + 1;
      }
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(metrics.render(states, manager.hostMemory(), manager.admissionStats(), manager.warmCount) + activity.renderPrometheus());
      return;
    }
    rpc(req, res);
  };

  const server = new H1H2cServer(
    (req, res) => handle(req as IncomingMessage, res as ServerResponse),
    (req, socket, head) => {
      if (fleet && !takeNodeToken(req as IncomingMessage, fleet.token)) {
        refuseUpgrade(socket, 401, NODE_ONLY_MESSAGE);
        return true;
      }
      return proxy.upgrade(req, socket, head);
    },
    (protocol) => metrics.connectionAccepted(protocol),
  );
  const front = pairs ? new TlsFront({ pairs, http: server, log }) : undefined;
  const listener = listenerFor(parseListen(`tcp://${opts.host}:${opts.port}`));
  const address = await listener.listen((socket) => (front ? front.accept(socket) : server.accept(socket)));
  const port = Number(address.slice(address.lastIndexOf(":") + 1));
  const url = `${front ? "https" : "http"}://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${port}`;
  if (opts.domain === undefined) deps.publicDomain = `localhost:${port}`;
  const wildcard = opts.host === "0.0.0.0" || opts.host === "::";
  const advertiseUrl = fleet ? (fleet.advertiseUrl ?? `http://${wildcard ? hostname() : opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${port}`) : undefined;
  const presence = fleet
    ? await startNodePresence({
        store,
        name: nodeName!,
        url: advertiseUrl!,
        runtime: runtime.name,
        limits: { ...DEFAULT_LIMITS, ...opts.limits },
        imagesDir: images,
        sandboxes: () => manager.list({ states: ["creating", "running", "pausing", "paused", "resuming"] }),
        ...(cluster ? { cluster } : {}),
        log,
      })
    : undefined;
  log.info(
    {
      url,
      runtime: runtime.name,
      dataDir: opts.dataDir,
      notes,
      ...(fleet ? { node: nodeName, advertiseUrl } : {}),
      ...(front ? { tls: front.certificates.map((p) => ({ names: p.names, notAfter: p.notAfter.toISOString(), fingerprint256: p.fingerprint256 })) } : {}),
    },
    fleet ? "fleet node listening" : "control plane listening",
  );
  return {
    url,
    workspaceUrl: `${url}${WORKSPACE_PREFIX}`,
    dashboardUrl: `${url}${DASHBOARD_PREFIX}/`,
    port,
    createdApiKey,
    manager,
    snapshots,
    store,
    runtime,
    activity,
    notes,
    ...(advertiseUrl ? { advertiseUrl } : {}),
    ...(front ? { certificates: () => front.certificates } : {}),
    async close() {
      await presence?.stop();
      guard?.stop();
      const closed = listener.close();
      front?.close();
      server.close();
      await closed;
      dashboard?.close();
      await activity.close();
      await templates.close();
      await manager.close();
      metrics.close();
      await store.close();
    },
  };
}
