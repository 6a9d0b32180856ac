// `locale2b api` (a fleet's stateless API replica) and `locale2b nodes`
// (the fleet's nodes as its Postgres knows them: list, cordon, uncordon,
// remove). `locale2b node` is serve-command.ts with the node role.
import { createLogger } from "../../envd/log.js";
import { DEFAULT_ACTIVITY } from "../activity.js";
import { DEFAULT_PORT } from "../config.js";
import { NODE_LOST_MS, type NodeRecord } from "../domain/node.js";
import { startFleetApi } from "../fleet/api-server.js";
import { inCluster } from "../fleet/kubernetes-client.js";
import { HistoryPruner, type HistoryRetention } from "../fleet/history-pruner.js";
import { KubernetesNodes } from "../fleet/kubernetes-nodes.js";
import { PgActivityHistory } from "../store/pg-activity-history.js";
import { PgStore } from "../store/pg-store.js";
import { keySource } from "../secrets/secret-key.js";
import { setting, type SettingName } from "../settings.js";
import { CliError, intOption, parse, table, UsageError } from "./args.js";
import { API_KEY_RE, nodeTokenSetting } from "./serve-command.js";

const API_HELP = `Usage: locale2b api --database-url URL [options]

Runs one of a fleet's API replicas: the E2B REST API and the envd proxy for
every sandbox of every node ('locale2b node'), stateless, so any number may
run behind one Service or load balancer. It checks API keys against the
fleet's Postgres, places each create on a ready node with room, lists across
nodes, and sends everything about one sandbox (its REST routes, envd streams,
files, <port>-<id>.<domain> hosts) to the node that runs it, in one hop, with
the node token (LOCALE2B_NODE_TOKEN). docs/fleet.md says how to run a fleet.

Options:
  -p, --port N             port (default: $PORT or ${DEFAULT_PORT})
      --host ADDR          address to listen on (default 0.0.0.0)
      --database-url URL   the fleet's Postgres (default: $LOCALE2B_DATABASE_URL)
      --domain NAME        route <port>-<sandboxId>.NAME hosts to sandboxes; the
                           nodes' --domain must be the same (default localhost)
      --event-retention-hours N    the fleet's events are kept N hours (24)
      --audit-retention-days N     its audit entries, N days (30)
      --metrics-retention-hours N  its metric samples, N hours (24)
  -h, --help               show this help

The replicas prune the fleet's shared history (every hour, one at a time)
with their retention (or LOCALE2B_EVENT_RETENTION_HOURS,
LOCALE2B_AUDIT_RETENTION_DAYS, LOCALE2B_METRICS_RETENTION_HOURS); nodes
write it and do not prune it. Give every replica the same.

The first replica to start on an empty store creates an API key and prints
it once (or give one in LOCALE2B_API_KEY); 'locale2b keys --database-url'
makes more.
`;

const NODES_HELP = `Usage: locale2b nodes <command> --database-url URL

The fleet's nodes as its Postgres knows them (each writes a heartbeat every
few seconds; one silent for ${NODE_LOST_MS / 1000} s is lost).

Commands:
  list              name, state, where API replicas reach it, sandboxes, memory,
                    vCPUs (given/budget), last heartbeat
  cordon NAME       take no more creates on NAME (its sandboxes keep running;
                    kill or let them time out to drain it)
  uncordon NAME     take creates on NAME again
  remove NAME       forget a node that is gone for good (its sandboxes' records
                    stay: they answer "lost with node NAME")

Options:
      --database-url URL   the fleet's Postgres (default: $LOCALE2B_DATABASE_URL)
      --json               list: print JSON
  -h, --help               show this help
`;

function databaseUrlOf(value: string | undefined, command: string): string {
  const url = value || setting("LOCALE2B_DATABASE_URL");
  if (!url) throw new UsageError("the fleet's Postgres is needed: --database-url or LOCALE2B_DATABASE_URL", command);
  if (!/^postgres(ql)?:\/\//.test(url)) throw new CliError(`--database-url must be a postgresql:// URL, got '${url.split(":")[0]}:…'`, 2);
  return url;
}

/** The fleet's retention: flags, then their LOCALE2B_* variables, then serve's defaults. */
function retentionOptions(values: Record<string, string | boolean | undefined>): HistoryRetention {
  const HOUR = 3_600_000;
  const opt = (flag: string, variable: SettingName, max: number) => intOption((values[flag] as string | undefined) ?? setting(variable), `--${flag}`, "api", { min: 1, max });
  const eventHours = opt("event-retention-hours", "LOCALE2B_EVENT_RETENTION_HOURS", 24 * 365);
  const auditDays = opt("audit-retention-days", "LOCALE2B_AUDIT_RETENTION_DAYS", 3650);
  const metricsHours = opt("metrics-retention-hours", "LOCALE2B_METRICS_RETENTION_HOURS", 24 * 365);
  return {
    eventRetentionMs: eventHours !== undefined ? eventHours * HOUR : DEFAULT_ACTIVITY.eventRetentionMs,
    auditRetentionMs: auditDays !== undefined ? auditDays * 24 * HOUR : DEFAULT_ACTIVITY.auditRetentionMs,
    metricsRetentionMs: metricsHours !== undefined ? metricsHours * HOUR : DEFAULT_ACTIVITY.metricsRetentionMs,
  };
}

export async function runApiCommand(args: string[]): Promise<number> {
  const { values } = parse("api", {
    args,
    options: {
      port: { type: "string", short: "p" },
      host: { type: "string" },
      "database-url": { type: "string" },
      domain: { type: "string" },
      "event-retention-hours": { type: "string" },
      "audit-retention-days": { type: "string" },
      "metrics-retention-hours": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(API_HELP);
    return 0;
  }
  const retention = retentionOptions(values);
  const databaseUrl = databaseUrlOf(values["database-url"], "api");
  const token = nodeTokenSetting("api");
  const port = intOption(values.port ?? process.env.PORT, "--port", "api", { max: 65535 }) ?? DEFAULT_PORT;
  const host = values.host || "0.0.0.0";
  const apiKey = setting("LOCALE2B_API_KEY")?.trim() || undefined;
  if (apiKey && !API_KEY_RE.test(apiKey)) throw new CliError("LOCALE2B_API_KEY must be 'e2b_' followed by 40 lowercase hex characters", 2);

  let stopping = false;
  let onStop: (() => void) | undefined;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(130);
    stopping = true;
    process.stderr.write(`locale2b api: ${signal}: shutting down\n`);
    onStop?.();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);

  const log = createLogger({ component: "fleet-api" });
  const store = await PgStore.open(databaseUrl).catch((err: Error) => {
    throw new CliError(`cannot open the fleet's Postgres: ${err.message}`, 2);
  });
  let createdKey: string | undefined;
  if (apiKey) await store.importApiKey(apiKey, "LOCALE2B_API_KEY");
  else if ((await store.listApiKeys()).length === 0) createdKey = (await store.createApiKey("default")).key;
  // In a pod with a service account: nodes are judged by their Leases and Node objects (kubernetes-nodes.ts).
  const cluster = inCluster();
  const kubernetes = cluster ? new KubernetesNodes({ cluster, log }) : undefined;
  await kubernetes?.start();
  // Events, audit entries and metrics history: every node's, read from Postgres, and pruned here.
  const history = PgActivityHistory.open(databaseUrl, log.child({ component: "activity" }));
  const pruner = new HistoryPruner({ history, retention, log: log.child({ component: "activity" }) });
  await pruner.start();
  let api;
  try {
    const secretsKey = keySource(undefined, { key: setting("LOCALE2B_SECRETS_KEY"), file: setting("LOCALE2B_SECRETS_KEY_FILE") });
    api = await startFleetApi({ host, port, store, history, nodeToken: token, secretsKey, ...(values.domain ? { domain: values.domain } : {}), ...(kubernetes ? { kubernetes } : {}), log });
  } catch (err) {
    await pruner.stop();
    await kubernetes?.stop();
    await history.close();
    await store.close();
    if ((err as NodeJS.ErrnoException).code === "EADDRINUSE") throw new CliError(`port ${port} on ${host} is in use: pick another with --port`);
    throw err;
  }
  const local = `http://${host === "0.0.0.0" ? "127.0.0.1" : host}:${api.port}`;
  const lines = [
    `locale2b api is listening on ${local} (a fleet API replica; nodes: ${(await store.listNodes()).map((n) => n.name).join(", ") || "none yet"})`,
    "",
    "Point the E2B SDK at it (or at the Service in front of the replicas):",
    `  export E2B_API_URL=${local}`,
    `  export E2B_SANDBOX_URL=${local}`,
    `  export E2B_VOLUME_API_URL=${local}`,
    createdKey ? `  export E2B_API_KEY=${createdKey}` : "  export E2B_API_KEY=<your key>",
  ];
  if (createdKey) lines.push("", "This API key was created now and is shown once: store it. (More: 'locale2b keys create --database-url ...'.)");
  process.stdout.write(`${lines.join("\n")}\n`);
  await new Promise<void>((resolve) => {
    onStop = resolve;
    if (stopping) resolve();
  });
  await api.close();
  await pruner.stop();
  await kubernetes?.stop();
  await history.close();
  await store.close();
  return 0;
}

function age(ms: number): string {
  const s = Math.round(ms / 1000);
  return s < 120 ? `${s}s ago` : `${Math.round(s / 60)}m ago`;
}

/** A node's state as an operator reads it: cordoned, ready, or lost (no heartbeat). */
export function nodeStatus(n: NodeRecord, now = Date.now()): string {
  if (now - n.heartbeatAt > NODE_LOST_MS) return n.state === "cordoned" ? "lost,cordoned" : "lost";
  return n.state;
}

export async function runNodesCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "-h" || sub === "--help" || sub === "help") {
    process.stdout.write(NODES_HELP);
    return sub === undefined ? 2 : 0;
  }
  const { values, positionals } = parse(`nodes ${sub}`, {
    args: rest,
    allowPositionals: true,
    options: { "database-url": { type: "string" }, json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
  });
  if (values.help) {
    process.stdout.write(NODES_HELP);
    return 0;
  }
  const store = await PgStore.open(databaseUrlOf(values["database-url"], `nodes ${sub}`), { max: 1 }).catch((err: Error) => {
    throw new CliError(`cannot open the fleet's Postgres: ${err.message}`, 2);
  });
  try {
    if (sub === "list") {
      const nodes = await store.listNodes();
      if (values.json) {
        process.stdout.write(`${JSON.stringify(nodes.map((n) => ({ ...n, status: nodeStatus(n) })), null, 2)}\n`);
        return 0;
      }
      const now = Date.now();
      process.stdout.write(
        table(
          ["NAME", "STATUS", "URL", "RUNTIME", "SANDBOXES", "MEMORY MiB", "VCPUS", "HEARTBEAT"],
          nodes.map((n) => [
            n.name,
            nodeStatus(n, now),
            n.url,
            n.runtime,
            `${n.capacity.sandboxes}/${n.capacity.maxSandboxes}`,
            `${n.capacity.memoryMB}/${n.capacity.memoryBudgetMB}`,
            n.capacity.cpuBudget === undefined ? "-" : `${n.capacity.cpus ?? 0}/${n.capacity.cpuBudget}`,
            age(now - n.heartbeatAt),
          ]),
        ),
      );
      return 0;
    }
    if (sub === "cordon" || sub === "uncordon" || sub === "remove") {
      const name = positionals[0];
      if (!name || positionals.length > 1) throw new UsageError(`nodes ${sub} takes one node name`, "nodes");
      const done = sub === "remove" ? await store.deleteNode(name) : await store.setNodeState(name, sub === "cordon" ? "cordoned" : "ready");
      if (!done) throw new CliError(`no node '${name}' in this fleet ('locale2b nodes list' shows them)`);
      process.stdout.write(`${sub === "cordon" ? "cordoned" : sub === "uncordon" ? "uncordoned" : "removed"} ${name}\n`);
      return 0;
    }
    throw new UsageError(`unknown nodes command '${sub}' (list, cordon, uncordon, remove)`, "nodes");
  } finally {
    await store.close();
  }
}
