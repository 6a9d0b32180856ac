// `locale2b keys create|list|revoke`: API keys, straight in the store: the
// data dir's SQLite, or Postgres with --database-url (a running server sees
// the change at once).
import { existsSync } from "node:fs";
import { SqliteStore } from "../store/sqlite-store.js";
import type { ApiKeyInfo, Store } from "../store/store.js";
import { PgStore } from "../store/pg-store.js";
import { setting } from "../settings.js";

/** Where the keys are: Postgres when a URL is given, else the data dir's SQLite. */
interface KeyStore {
  dataDir: string;
  databaseUrl?: string;
}
import { dbPath, defaultDataDir, resolveDataDir } from "../config.js";
import { CliError, parse, table, UsageError } from "./args.js";

const HELP = `Usage: locale2b keys <command> [options]

Manages the API keys a locale2b server accepts ('e2b_' + 40 hex; only their
hashes are stored). Works on the store directly: the server may be running.

Commands:
  create [--name NAME]   create a key and print it (once: store it)
  list                   list keys: id, name, masked key, created, last used
  revoke <ID|KEY>        revoke a key by its id (from 'list') or the key itself

Options:
  -d, --data-dir DIR   the server's data dir (default: $LOCALE2B_DATA_DIR, or
                       ${defaultDataDir()})
      --database-url URL   the servers' Postgres store instead (default:
                       $LOCALE2B_DATABASE_URL)
      --json           list: print JSON
  -h, --help           show this help

Clients send a key as X-API-KEY (E2B_API_KEY for the E2B SDKs) or as
Authorization: Bearer <key>.
`;

const CMD = "keys";

/** Runs fn, retrying briefly while another process (the server) holds the database lock. */
async function withStore<T>(where: KeyStore, fn: (store: Store) => Promise<T>): Promise<T> {
  if (where.databaseUrl) {
    const store = await PgStore.open(where.databaseUrl, { max: 1 });
    try {
      return await fn(store);
    } finally {
      await store.close();
    }
  }
  const dataDir = where.dataDir;
  for (let attempt = 0; ; attempt++) {
    let store: SqliteStore | undefined;
    try {
      store = new SqliteStore(dbPath(dataDir));
      return await fn(store);
    } catch (err) {
      const msg = (err as Error).message ?? "";
      if (!/locked|busy/i.test(msg) || attempt >= 50) throw err;
      await new Promise((r) => setTimeout(r, 100));
    } finally {
      await store?.close();
    }
  }
}

function formatTime(ms: number | undefined): string {
  return ms === undefined ? "never" : new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
}

function formatKeys(keys: ApiKeyInfo[]): string {
  if (!keys.length) return "no API keys: create one with 'locale2b keys create'\n";
  return table(
    ["ID", "NAME", "KEY", "CREATED", "LAST USED"],
    keys.map((k) => [k.id, k.name, k.mask, formatTime(k.createdAt), formatTime(k.lastUsedAt)]),
  );
}

export async function runKeysCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "help" || sub === "--help" || sub === "-h") {
    process.stdout.write(HELP);
    return sub === undefined ? 2 : 0;
  }
  if (!["create", "list", "revoke"].includes(sub)) throw new UsageError(`unknown keys command '${sub}' (create, list, revoke)`, CMD);
  const command = `${CMD} ${sub}`;
  const { values, positionals } = parse(command, {
    args: rest,
    allowPositionals: true,
    options: {
      "data-dir": { type: "string", short: "d" },
      "database-url": { type: "string" },
      name: { type: "string" },
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const dataDir = resolveDataDir(values["data-dir"]);
  const databaseUrl = values["database-url"] || setting("LOCALE2B_DATABASE_URL") || undefined;
  const where: KeyStore = { dataDir, ...(databaseUrl ? { databaseUrl } : {}) };
  const place = databaseUrl ? "the Postgres store" : dataDir;
  /** The data dir has no store yet (Postgres: the servers' database always has one). */
  const noStore = () => !databaseUrl && !existsSync(dbPath(dataDir));
  const expectArgs = (n: number, what: string) => {
    if (positionals.length !== n) throw new UsageError(`expected ${what}, got ${positionals.length ? positionals.join(" ") : "nothing"}`, command);
  };
  switch (sub) {
    case "create": {
      expectArgs(0, "no arguments");
      const name = values.name?.trim() || "cli";
      const { key, info } = await withStore(where, (s) => s.createApiKey(name));
      if (values.json) process.stdout.write(`${JSON.stringify({ ...info, key })}\n`);
      else process.stdout.write(`${key}\n`);
      process.stderr.write(`Created API key ${info.id} ('${info.name}') in ${place}. It is shown once: store it (use it as E2B_API_KEY).\n`);
      return 0;
    }
    case "list": {
      expectArgs(0, "no arguments");
      if (noStore()) {
        throw new CliError(`no locale2b data in ${dataDir}: start 'locale2b serve' there first, or pass --data-dir`);
      }
      const keys = await withStore(where, (s) => s.listApiKeys());
      process.stdout.write(values.json ? `${JSON.stringify(keys, null, 2)}\n` : formatKeys(keys));
      return 0;
    }
    case "revoke": {
      expectArgs(1, "one key id or key (see 'locale2b keys list')");
      if (noStore()) throw new CliError(`no locale2b data in ${dataDir}: nothing to revoke (pass --data-dir?)`);
      const target = positionals[0]!.trim();
      const { revoked, left } = await withStore(where, async (s) => ({ revoked: await s.revokeApiKey(target), left: (await s.listApiKeys()).length }));
      if (!revoked) throw new CliError(`no API key matches '${target}' in ${place} (see 'locale2b keys list')`);
      process.stdout.write(`revoked ${target.startsWith("e2b_") ? "the key" : target}\n`);
      if (left === 0) {
        process.stderr.write("No API keys remain: the server refuses every request until you run 'locale2b keys create'.\n");
      }
      return 0;
    }
    default:
      throw new UsageError(`unknown keys command '${sub}' (create, list, revoke)`, CMD);
  }
}
