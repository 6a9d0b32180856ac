// `locale2b audit export`: the audit log of a running server as JSON Lines
// on stdout (GET <server>/workspace/audit, streamed).
import http from "node:http";
import https from "node:https";
import { clientApiKey, clientUrl } from "../config.js";
import { CliError, parse, UsageError, writeOut } from "./args.js";
import { explain } from "./client.js";

const HELP = `Usage: locale2b audit export [options] > audit.jsonl

Writes the server's audit log as JSON Lines (one entry per line, oldest
first): who (an API key's id, envd-token for commands an E2B SDK ran through
the proxy, system), what (a route, an RPC or an event), which sandbox, the
result, and safe details. Keys, tokens and secret env values are never in it.

Options:
      --since TIME     entries at or after TIME: ISO 8601 (2026-11-23T10:00:00Z),
                       unix seconds, or an age such as 30m, 24h, 7d
      --until TIME     entries before TIME (same forms)
      --sandbox ID     only this sandbox's entries
      --actor ID       only this actor's (an API key id, envd-token, system)
      --limit N        at most N entries
      --url URL        the server (default: $LOCALE2B_URL or http://127.0.0.1:3000)
      --api-key KEY    (default: $E2B_API_KEY, then $LOCALE2B_API_KEY)
  -h, --help           show this help

The server keeps entries for its audit retention (serve --audit-retention-days).
`;

const CMD = "audit export";

/** TIME as ISO 8601: ISO passes through, unix seconds and ages (30m, 24h, 7d) are converted. */
export function parseTime(value: string, name: string, now = Date.now()): string {
  const age = /^(\d+)\s*([smhd])$/.exec(value.trim());
  if (age) {
    const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[age[2] as "s" | "m" | "h" | "d"];
    return new Date(now - Number(age[1]) * unit).toISOString();
  }
  if (/^\d+(\.\d+)?$/.test(value)) return new Date(Number(value) * 1000).toISOString();
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw new UsageError(`${name} must be an ISO 8601 time, unix seconds or an age like 24h, got '${value}'`, CMD);
  return new Date(ms).toISOString();
}

export async function runAuditCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "-h" || sub === "--help" || sub === "help") {
    process.stdout.write(HELP);
    return sub === undefined ? 2 : 0;
  }
  if (sub !== "export") throw new UsageError(`unknown audit command '${sub}' (known: export)`, "audit");
  const { values } = parse(CMD, {
    args: rest,
    options: {
      since: { type: "string" },
      until: { type: "string" },
      sandbox: { type: "string" },
      actor: { type: "string" },
      limit: { type: "string" },
      url: { type: "string" },
      "api-key": { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const url = clientUrl(values.url);
  const key = clientApiKey(values["api-key"]);
  if (!key) throw new CliError("no API key: pass --api-key or set E2B_API_KEY (or LOCALE2B_API_KEY)");
  const q = new URLSearchParams();
  if (values.since) q.set("since", parseTime(values.since, "--since"));
  if (values.until) q.set("until", parseTime(values.until, "--until"));
  if (values.sandbox) q.set("sandbox_id", values.sandbox);
  if (values.actor) q.set("actor", values.actor);
  if (values.limit) {
    if (!/^\d+$/.test(values.limit) || Number(values.limit) < 1) throw new UsageError(`--limit must be a positive whole number, got '${values.limit}'`, CMD);
    q.set("limit", values.limit);
  }
  const target = new URL(`${url}/workspace/audit?${q}`);
  const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
    const req = (target.protocol === "https:" ? https : http).get(target, { headers: { "x-api-key": key }, agent: false }, resolve);
    req.on("error", reject);
  }).catch((err: unknown) => {
    throw explain(err, url);
  });
  if (res.statusCode !== 200) {
    let text = "";
    for await (const c of res) text += c;
    let message = text.trim();
    try {
      message = (JSON.parse(text) as { message?: string }).message ?? message;
    } catch {
      // not JSON
    }
    throw new CliError(`the server answered ${res.statusCode}: ${message}`);
  }
  for await (const chunk of res) await writeOut(process.stdout, chunk as Buffer);
  return 0;
}
