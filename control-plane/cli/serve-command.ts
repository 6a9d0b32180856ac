// `locale2b serve` (= `npm start`): the control plane, E2B REST API, Connect
// API and envd proxy on one port.
import { DEFAULT_LIMITS } from "../manager/options.js";
import { startControlPlane, type RunningControlPlane } from "../server.js";
import { imagesDir } from "../images/layout.js";
import { DEFAULT_HOST, DEFAULT_PORT, defaultDataDir, resolveDataDir } from "../config.js";
import { createRuntime, DEFAULT_RUNTIME, findRuntime, RUNTIMES, runtimeNamed, runtimeNames } from "../runtimes/registry.js";
import type { ActivitySettings } from "../activity.js";
import type { WorkspaceSettings } from "../api/workspace/deps.js";
import { DASHBOARD_PREFIX } from "../api/dashboard/router.js";
import { WORKSPACE_PREFIX } from "../api/workspace/router.js";
import { CliError, intOption, parse, UsageError } from "./args.js";
import { defaultAdmissionLimits } from "../manager/admission.js";
import { setting, settingsHelp, type SettingName } from "../settings.js";
import { hostname } from "node:os";
import { TlsConfigError, type TlsFiles } from "../tls/certificates.js";

const HELP = `Usage: locale2b serve [options]

Runs the locale2b control plane: the E2B REST API, the Connect API
(locale2b.controlplane.v1, with gRPC reflection), the envd proxy and the
workspace API (under /workspace) on one port, plus GET /health and
Prometheus GET /metrics. Point the E2B SDKs at it with E2B_API_URL,
E2B_SANDBOX_URL and E2B_API_KEY, an agent harness with LOCALE2B_BASE_URL and
LOCALE2B_API_KEY (all printed at start).

Options:
  -p, --port N               port (default: $PORT or ${DEFAULT_PORT}; 0 picks a free one)
      --host ADDR            address to listen on (default ${DEFAULT_HOST}; 0.0.0.0 to
                             expose it on every interface)
  -d, --data-dir DIR         state (SQLite, sandboxes) (default: $LOCALE2B_DATA_DIR, or
                             ${defaultDataDir()})
      --database-url URL     keep sandboxes, API keys, snapshots and templates in
                             Postgres (postgresql://user:password@host/db) instead of
                             the data dir's SQLite (default: $LOCALE2B_DATABASE_URL)
      --node-name NAME       this host's name in that store; a start adopts only its
                             own sandboxes (default: $LOCALE2B_NODE_NAME, else the
                             host name)
      --max-sandboxes N      sandboxes that may exist at once, running or paused
                             (default ${DEFAULT_LIMITS.maxSandboxes}; more are refused with 429)
      --memory-budget-mb N   memory all sandboxes may be given together, in MiB
                             (default ${DEFAULT_LIMITS.memoryBudgetMB})
      --cpu-budget N         vCPUs all sandboxes may be given together (their
                             cpuCount; default ${DEFAULT_LIMITS.cpuBudget}: 64 per core, at least 256)
      --max-concurrent-creates N
                             sandbox starts run at once; more creates wait their turn
                             (default: $LOCALE2B_MAX_CONCURRENT_CREATES, else one per
                             CPU, here ${defaultAdmissionLimits().concurrent})
      --create-queue N       creates that may wait for a start; one more is answered
                             429 with Retry-After, never a time-out (default:
                             $LOCALE2B_CREATE_QUEUE, else 16 per start slot, here ${defaultAdmissionLimits().queue})
      --warm-pool N          sandboxes kept started ahead of time for creates of the
                             default shape (base template, default vCPUs and memory,
                             internet on): such a create only hands one over
                             (default: $LOCALE2B_WARM_POOL, else the runtime's own:
${RUNTIMES.map((r) => `                             ${r.warmPoolDefault} on ${r.name}`).join("\n")})
      --domain NAME          route <port>-<sandboxId>.NAME hosts to sandboxes
                             (default localhost)
      --tls-cert FILE        serve HTTPS (HTTP/1.1 and HTTP/2 by ALPN) on the port, with
      --tls-key FILE         this PEM certificate (chain) and its unencrypted key: a
                             wildcard for *.NAME of --domain covers the sandbox hosts.
                             Repeat both for one certificate per host (chosen by SNI,
                             the first is the default). The files are read again when
                             they change; open connections keep their certificate
                             (default: $LOCALE2B_TLS_CERT, $LOCALE2B_TLS_KEY; docs/tls.md)
      --runtime NAME         sandbox runtime, one of:
${RUNTIMES.map((r) => `                               ${r.name}: ${r.help}`).join("\n")}
                             Default: $LOCALE2B_RUNTIME, else ${DEFAULT_RUNTIME}. 'locale2b doctor'
                             says what a host has; scripts/setup-host installs it
      --audit-retention-days N     keep audit entries N days (default 30;
                                   $LOCALE2B_AUDIT_RETENTION_DAYS)
      --event-retention-hours N    keep events N hours for replay (default 24;
                                   $LOCALE2B_EVENT_RETENTION_HOURS)
      --metrics-interval-s N       sample every running sandbox every N seconds
                                   (default 5; $LOCALE2B_METRICS_INTERVAL_S)
      --metrics-retention-hours N  keep metric samples N hours (default 24;
                                   $LOCALE2B_METRICS_RETENTION_HOURS)
      --session-buffer-mb N        output kept per background session (default 8;
                                   $LOCALE2B_SESSION_BUFFER_MB)
      --no-sandbox-activity        do not watch what runs inside sandboxes: no exec.*
                                   and file.* events and audit entries (lifecycle
                                   events and API requests are still recorded)
      --workspace-idle-timeout-s N a workspace sandbox pauses after N idle seconds
                                   and resumes on the next call (default 3600;
                                   $LOCALE2B_WORKSPACE_IDLE_TIMEOUT_S)
  -h, --help                 show this help

Environment (every LOCALE2B_* variable; docs/configuration.md explains them):
${settingsHelp()}

Sandboxes keep running when the server stops (SIGINT, SIGTERM); the next
start with the same data dir adopts them again.
`;

export const API_KEY_RE = /^e2b_[0-9a-f]{40}$/;

const NODE_HELP = `Usage: locale2b node --database-url URL [serve's options] [--advertise-url URL]

Runs a fleet node: the sandboxes, runtimes, warm pool, snapshots and template
images of this host, behind the fleet's API replicas ('locale2b api'). It
keeps its state in the fleet's Postgres, writes a heartbeat there every few
seconds (where it is reached, its room, its images), and answers only requests
that carry the fleet's node token (LOCALE2B_NODE_TOKEN); clients talk to an
API replica. docs/fleet.md says how to run a fleet.

Options: those of 'locale2b serve' (see 'locale2b serve --help'), and
      --advertise-url URL    where API replicas reach this node: http://host:port
                             (default: $LOCALE2B_ADVERTISE_URL, else
                             http://<--host, or the host name for 0.0.0.0>:<port>)
Defaults that differ from serve: --host 0.0.0.0; --node-name is required in
effect (default: the host name); no API key is created (the API does that).
`;


export interface ServeOptions {
  host: string;
  port: number;
  dataDir: string;
  maxSandboxes?: number;
  memoryBudgetMB?: number;
  cpuBudget?: number;
  domain?: string;
  apiKey?: string;
  runtime: string;
  warmPool: number;
  templateWarmPool: number;
  activity: Partial<ActivitySettings>;
  workspace: Partial<WorkspaceSettings>;
  maxConcurrentCreates?: number;
  createQueue?: number;
  /** Postgres instead of SQLite (LOCALE2B_DATABASE_URL). */
  databaseUrl?: string;
  /** This host's name in a shared store. */
  nodeName?: string;
  /** `locale2b node`: a fleet node, reached by the API replicas at advertiseUrl with the node token. */
  fleet?: { advertiseUrl?: string; token: string };
  /** Certificate and key files: serve TLS. */
  tls?: TlsFiles[];
}

/** `serve`: one box, everything; `node`: a fleet node behind `locale2b api` replicas. */
export type ServeRole = "serve" | "node";

/** The fleet's shared secret from LOCALE2B_NODE_TOKEN (both roles need it). */
export function nodeTokenSetting(command: string, env: NodeJS.ProcessEnv = process.env): string {
  const token = setting("LOCALE2B_NODE_TOKEN", env)?.trim();
  if (!token) throw new CliError(`locale2b ${command} needs LOCALE2B_NODE_TOKEN, the fleet's shared secret (the same on every API replica and node), e.g. LOCALE2B_NODE_TOKEN=$(openssl rand -hex 32)`, 2);
  if (token.length < 32) throw new CliError(`LOCALE2B_NODE_TOKEN is ${token.length} characters: use at least 32 (e.g. $(openssl rand -hex 32))`, 2);
  return token;
}

export function parseServeArgs(args: string[], env: NodeJS.ProcessEnv = process.env, role: ServeRole = "serve"): ServeOptions | "help" {
  const { values } = parse(role, {
    args,
    options: {
      port: { type: "string", short: "p" },
      host: { type: "string" },
      "data-dir": { type: "string", short: "d" },
      "database-url": { type: "string" },
      "node-name": { type: "string" },
      ...(role === "node" ? { "advertise-url": { type: "string" as const } } : {}),
      "max-sandboxes": { type: "string" },
      "memory-budget-mb": { type: "string" },
      "cpu-budget": { type: "string" },
      domain: { type: "string" },
      runtime: { type: "string" },
      "warm-pool": { type: "string" },
      "audit-retention-days": { type: "string" },
      "event-retention-hours": { type: "string" },
      "metrics-interval-s": { type: "string" },
      "metrics-retention-hours": { type: "string" },
      "session-buffer-mb": { type: "string" },
      "workspace-idle-timeout-s": { type: "string" },
      "no-sandbox-activity": { type: "boolean" },
      "max-concurrent-creates": { type: "string" },
      "create-queue": { type: "string" },
      "tls-cert": { type: "string", multiple: true },
      "tls-key": { type: "string", multiple: true },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) return "help";
  const runtime = values.runtime || setting("LOCALE2B_RUNTIME", env) || DEFAULT_RUNTIME;
  if (!findRuntime(runtime)) {
    throw new UsageError(`unknown runtime '${runtime}' (known: ${runtimeNames().join(", ")})`, role);
  }
  const apiKey = setting("LOCALE2B_API_KEY", env)?.trim() || undefined;
  if (apiKey && !API_KEY_RE.test(apiKey)) {
    throw new CliError("LOCALE2B_API_KEY must be 'e2b_' followed by 40 lowercase hex characters, e.g. e2b_$(openssl rand -hex 20)", 2);
  }
  const databaseUrl = values["database-url"] || setting("LOCALE2B_DATABASE_URL", env) || undefined;
  if (databaseUrl && !/^postgres(ql)?:\/\//.test(databaseUrl)) {
    throw new CliError(`--database-url must be a postgresql:// URL (postgresql://user:password@host:5432/db), got '${databaseUrl.split(":")[0]}:…'`, 2);
  }
  const nodeName = values["node-name"] || setting("LOCALE2B_NODE_NAME", env) || (databaseUrl ? hostname() : undefined);
  if (nodeName !== undefined && !/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(nodeName)) {
    throw new CliError(`--node-name '${nodeName}' is not a name: letters, digits, '.', '_' and '-', at most 63`, 2);
  }
  const host = values.host || (role === "node" ? "0.0.0.0" : DEFAULT_HOST);
  const port = intOption(values.port ?? env.PORT, "--port", role, { max: 65535 }) ?? DEFAULT_PORT;
  let fleet: ServeOptions["fleet"];
  if (role === "node") {
    if (!databaseUrl) throw new CliError("locale2b node needs the fleet's Postgres: --database-url or LOCALE2B_DATABASE_URL", 2);
    const advertiseUrl = (values["advertise-url"] as string | undefined) || setting("LOCALE2B_ADVERTISE_URL", env);
    if (advertiseUrl !== undefined && !/^http:\/\/[^/?#]+(:\d+)?\/?$/.test(advertiseUrl)) {
      throw new CliError(`--advertise-url '${advertiseUrl}' must be http://host:port (where API replicas reach this node)`, 2);
    }
    fleet = { ...(advertiseUrl ? { advertiseUrl: advertiseUrl.replace(/\/$/, "") } : {}), token: nodeTokenSetting("node", env) };
  }
  const tls = tlsFiles(values["tls-cert"], values["tls-key"], env);
  if (tls && role === "node") throw new CliError("locale2b node does not serve TLS itself: its link to the API replicas is plain HTTP with the node token (run it on a private network); terminate TLS for clients in front of the API replicas (a load balancer or Ingress; docs/fleet.md)", 2);
  return {
    ...(tls ? { tls } : {}),
    ...(databaseUrl ? { databaseUrl } : {}),
    ...(nodeName ? { nodeName } : {}),
    ...(fleet ? { fleet } : {}),
    host,
    port,
    dataDir: resolveDataDir(values["data-dir"], env),
    maxSandboxes: intOption(values["max-sandboxes"], "--max-sandboxes", "serve", { min: 1 }),
    memoryBudgetMB: intOption(values["memory-budget-mb"], "--memory-budget-mb", "serve", { min: 1 }),
    cpuBudget: intOption(values["cpu-budget"], "--cpu-budget", "serve", { min: 1 }),
    domain: values.domain || undefined,
    apiKey,
    runtime,
    maxConcurrentCreates: intOption(values["max-concurrent-creates"] ?? setting("LOCALE2B_MAX_CONCURRENT_CREATES", env), "--max-concurrent-creates", "serve", { min: 1, max: 1024 }),
    createQueue: intOption(values["create-queue"] ?? setting("LOCALE2B_CREATE_QUEUE", env), "--create-queue", "serve", { min: 0, max: 100_000 }),
    warmPool: intOption(values["warm-pool"] ?? setting("LOCALE2B_WARM_POOL", env), "--warm-pool", "serve", { min: 0, max: 64 }) ?? runtimeNamed(runtime).warmPoolDefault,
    templateWarmPool: intOption(setting("LOCALE2B_TEMPLATE_WARM_POOL", env), "LOCALE2B_TEMPLATE_WARM_POOL", "serve", { min: 0, max: 16 }) ?? (runtimeNamed(runtime).warmPoolDefault > 0 ? 1 : 0),
    ...activityOptions(values, env),
  };
}

/**
 * The --tls-cert/--tls-key pairs, in order (flags win; else the variables,
 * comma-separated lists paired by position); undefined: no TLS.
 */
function tlsFiles(certFlags: string[] | undefined, keyFlags: string[] | undefined, env: NodeJS.ProcessEnv): TlsFiles[] | undefined {
  const list = (v: string | undefined) => (v ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  const flags = (certFlags?.length ?? 0) + (keyFlags?.length ?? 0) > 0;
  const certs = flags ? (certFlags ?? []) : list(setting("LOCALE2B_TLS_CERT", env));
  const keys = flags ? (keyFlags ?? []) : list(setting("LOCALE2B_TLS_KEY", env));
  const [c, k] = flags ? ["--tls-cert", "--tls-key"] : ["LOCALE2B_TLS_CERT", "LOCALE2B_TLS_KEY"];
  if (certs.length !== keys.length) {
    throw new UsageError(`${c} and ${k} go in pairs: got ${certs.length} certificate(s) and ${keys.length} key(s)`, "serve");
  }
  return certs.length ? certs.map((cert, i) => ({ cert, key: keys[i]! })) : undefined;
}

/** The retention, sampling and session options (flags, then their LOCALE2B_* variables). */
function activityOptions(values: Record<string, string | string[] | boolean | undefined>, env: NodeJS.ProcessEnv): Pick<ServeOptions, "activity" | "workspace"> {
  const opt = (flag: string, variable: SettingName, min: number, max: number) =>
    intOption((values[flag] as string | undefined) ?? setting(variable, env), `--${flag}`, "serve", { min, max });
  const auditDays = opt("audit-retention-days", "LOCALE2B_AUDIT_RETENTION_DAYS", 1, 3650);
  const eventHours = opt("event-retention-hours", "LOCALE2B_EVENT_RETENTION_HOURS", 1, 24 * 365);
  const intervalS = opt("metrics-interval-s", "LOCALE2B_METRICS_INTERVAL_S", 1, 3600);
  const metricsHours = opt("metrics-retention-hours", "LOCALE2B_METRICS_RETENTION_HOURS", 1, 24 * 365);
  const bufferMB = opt("session-buffer-mb", "LOCALE2B_SESSION_BUFFER_MB", 1, 4096);
  const idleS = opt("workspace-idle-timeout-s", "LOCALE2B_WORKSPACE_IDLE_TIMEOUT_S", 10, 24 * 3600);
  const HOUR = 3_600_000;
  return {
    activity: {
      ...(values["no-sandbox-activity"] ? { watchSandboxes: false } : {}),
      ...(auditDays !== undefined ? { auditRetentionMs: auditDays * 24 * HOUR } : {}),
      ...(eventHours !== undefined ? { eventRetentionMs: eventHours * HOUR } : {}),
      ...(intervalS !== undefined ? { metricsIntervalMs: intervalS * 1000 } : {}),
      ...(metricsHours !== undefined ? { metricsRetentionMs: metricsHours * HOUR } : {}),
      ...(bufferMB !== undefined ? { sessionBufferBytes: bufferMB * 1024 * 1024 } : {}),
    },
    workspace: idleS !== undefined ? { idleTimeoutSeconds: idleS } : {},
  };
}

/** A URL a client on this machine can use: wildcard addresses become loopback. */
function clientUrl(host: string, port: number, tls: boolean): string {
  const h = host === "0.0.0.0" ? "127.0.0.1" : host === "::" || host === "[::]" ? "[::1]" : host.includes(":") ? `[${host}]` : host;
  return `${tls ? "https" : "http"}://${h}:${port}`;
}

/** What `serve` prints once on stdout: where it listens and how to point the E2B SDK at it. */
export function startBanner(opts: ServeOptions, cp: Pick<RunningControlPlane, "port" | "createdApiKey" | "notes" | "runtime">): string {
  const url = clientUrl(opts.host, cp.port, opts.tls !== undefined);
  const lines = [
    `locale2b is listening on ${url} (runtime: ${cp.runtime.name}, data dir: ${opts.dataDir})`,
    "",
    "Point the E2B SDK at it:",
    `  export E2B_API_URL=${url}`,
    `  export E2B_SANDBOX_URL=${url}`,
    `  export E2B_VOLUME_API_URL=${url}`,
  ];
  if (opts.tls && opts.domain && opts.domain !== "localhost") {
    const domain = /:\d+$/.test(opts.domain) || cp.port === 443 ? opts.domain : `${opts.domain}:${cp.port}`;
    lines.push(
      `  (or, with wildcard DNS for *.${opts.domain.replace(/:\d+$/, "")} pointing here, only E2B_DOMAIN=${domain}: the SDK then reaches`,
      `   https://api.${domain} and https://<port>-<id>.${domain}; docs/tls.md)`,
    );
  }
  const workspace = [
    "",
    "Point an agent harness at its workspace API (same sandboxes, same keys, X-API-Key header):",
    `  export LOCALE2B_BASE_URL=${url}${WORKSPACE_PREFIX}`,
  ];
  if (cp.createdApiKey) {
    lines.push(`  export E2B_API_KEY=${cp.createdApiKey}`, ...workspace, `  export LOCALE2B_API_KEY=${cp.createdApiKey}`);
    lines.push("", "This API key was created now and is shown once: store it. (More: 'locale2b keys create'.)");
  } else if (opts.apiKey) {
    lines.push(`  export E2B_API_KEY="$LOCALE2B_API_KEY"`, ...workspace, "", "Use the key this server was given in LOCALE2B_API_KEY.");
  } else {
    lines.push(
      "  export E2B_API_KEY=<your key>",
      ...workspace,
      "  export LOCALE2B_API_KEY=<your key>",
      "",
      `Use the key printed when this data dir was first served, or make one with 'locale2b keys create --data-dir ${opts.dataDir}'.`,
    );
  }
  lines.push("", `Open the dashboard and sign in with that API key: ${url}${DASHBOARD_PREFIX}/`);
  if (opts.host === "0.0.0.0" || opts.host === "::") {
    lines.push(`Listening on every interface: from other machines use this host's address instead of ${url}.`);
  }
  lines.push("", `Runtime '${cp.runtime.name}': ${findRuntime(cp.runtime.name)?.banner ?? "sandboxes"}.`);
  for (const note of cp.notes) lines.push(`  - ${note}`);
  lines.push("", "Metrics: GET /metrics. Logs: stderr. Stop with Ctrl-C (sandboxes keep running).", "");
  return lines.join("\n");
}

/** What `locale2b node` prints once: it is not for clients. */
function nodeBanner(opts: ServeOptions, cp: Pick<RunningControlPlane, "port" | "notes" | "runtime" | "advertiseUrl">): string {
  const lines = [
    `locale2b node '${opts.nodeName}' is serving its fleet on ${opts.host}:${cp.port} (runtime: ${cp.runtime.name}, data dir: ${opts.dataDir})`,
    `API replicas reach it at ${cp.advertiseUrl}; it answers only them (LOCALE2B_NODE_TOKEN).`,
    "Point clients at a 'locale2b api' replica, not here.",
  ];
  for (const note of cp.notes) lines.push(`  - ${note}`);
  return `${lines.join("\n")}\n`;
}

export async function runServeCommand(args: string[], role: ServeRole = "serve"): Promise<number> {
  const opts = parseServeArgs(args, process.env, role);
  if (opts === "help") {
    process.stdout.write(role === "node" ? NODE_HELP : HELP);
    return 0;
  }
  const limits = {
    ...(opts.maxSandboxes !== undefined ? { maxSandboxes: opts.maxSandboxes } : {}),
    ...(opts.memoryBudgetMB !== undefined ? { memoryBudgetMB: opts.memoryBudgetMB } : {}),
    ...(opts.cpuBudget !== undefined ? { cpuBudget: opts.cpuBudget } : {}),
  };
  // Signal handlers first: a SIGTERM that comes as soon as the banner is out
  // (or during start-up) must shut down gracefully, not kill the process.
  let stopping: NodeJS.Signals | undefined;
  let onStop: (() => void) | undefined;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      process.stderr.write(`locale2b: ${signal} again, exiting now\n`);
      process.exit(130);
    }
    stopping = signal;
    process.stderr.write(`locale2b: ${signal}: shutting down (sandboxes keep running)\n`);
    onStop?.();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);

  let cp: RunningControlPlane;
  try {
    const images = imagesDir();
    const descriptor = runtimeNamed(opts.runtime);
    const runtime = await descriptor.create({ imagesDir: images });
    // Say what to install before spending minutes on an image the runtime could not run.
    await runtime.check();
    // As root, runtimes that run every sandbox on the base image's root directory get it built on first use.
    if (descriptor.baseImageAtStart && process.getuid?.() === 0 && setting("LOCALE2B_NO_IMAGE_BUILD") !== "1") {
      const { ensureBaseTemplate } = await import("../images/first-use.js");
      await ensureBaseTemplate(images).catch((err: Error) => {
        throw new CliError(err.message, 2);
      });
    }
    // A template may name its own runtime (`runtime:` in its definition): started on first use.
    const other = (name: string) => createRuntime(name, { imagesDir: images });
    cp = await startControlPlane({
      host: opts.host,
      port: opts.port,
      dataDir: opts.dataDir,
      ...(opts.databaseUrl ? { databaseUrl: opts.databaseUrl } : {}),
      ...(opts.nodeName ? { nodeName: opts.nodeName } : {}),
      ...(opts.fleet ? { fleet: opts.fleet } : {}),
      limits,
      domain: opts.domain,
      ...(opts.tls ? { tls: opts.tls } : {}),
      apiKey: opts.apiKey,
      runtime,
      createRuntime: other,
      imagesDir: images,
      warmPool: opts.warmPool,
      templateWarmPool: opts.templateWarmPool,
      activity: opts.activity,
      workspace: opts.workspace,
      admission: {
        ...(opts.maxConcurrentCreates !== undefined ? { concurrent: opts.maxConcurrentCreates } : {}),
        ...(opts.createQueue !== undefined ? { queue: opts.createQueue } : {}),
      },
    });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e instanceof Error && e.name === "RuntimeUnavailableError") {
      throw new CliError(`cannot start the '${opts.runtime}' runtime: ${e.message}`, 2);
    }
    if (e instanceof TlsConfigError) throw new CliError(`cannot serve TLS: ${e.message}`, 2);
    if (e.code === "EADDRINUSE") throw new CliError(`port ${opts.port} on ${opts.host} is in use: pick another with --port`);
    if (e.code === "EACCES" || e.code === "EROFS") throw new CliError(`cannot use ${opts.dataDir}: ${e.message} (choose another with --data-dir)`);
    throw err;
  }
  process.stdout.write(opts.fleet ? nodeBanner(opts, cp) : startBanner(opts, cp));
  // The other built-in templates (code-interpreter-v1), built once, in the background: the server answers meanwhile.
  if (runtimeNamed(opts.runtime).baseImageAtStart && process.getuid?.() === 0 && setting("LOCALE2B_NO_IMAGE_BUILD") !== "1") {
    const { BACKGROUND_TEMPLATES, buildInBackground } = await import("../images/first-use.js");
    void (async () => {
      for (const name of BACKGROUND_TEMPLATES) await buildInBackground(name, imagesDir());
    })();
  }

  await new Promise<void>((resolve) => {
    onStop = resolve;
    if (stopping) resolve();
  });
  try {
    await cp.close();
    return 0;
  } catch (err) {
    process.stderr.write(`locale2b: shutdown failed: ${(err as Error).message}\n`);
    return 1;
  }
}
