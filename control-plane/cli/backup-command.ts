// `locale2b backup <dest>`: an online, consistent backup of a data dir while
// its server runs (control-plane/backup/backup.ts).
import { backupDataDir } from "../backup/backup.js";
import { defaultDataDir, resolveDataDir } from "../config.js";
import { setting } from "../settings.js";
import { CliError, parse, UsageError } from "./args.js";

const HELP = `Usage: locale2b backup <dest> [options]

Backs up a locale2b data dir into the new folder <dest>, while its server
runs: the SQLite stores (sandboxes, API keys, templates, snapshots; events,
audit log, metrics history) as one consistent instant (SQLite's VACUUM INTO),
then the files they need: every snapshot and every sandbox paused to disk.
Not in it: running sandboxes' processes and memory (their records are: a
restore into the same data dir re-adopts those still running), and the
template image cache (images/, per host; see docs/operations.md).

Options:
  -d, --data-dir DIR   the server's data dir (default: $LOCALE2B_DATA_DIR, or
                       ${defaultDataDir()})
      --json           print the backup's manifest as JSON
  -h, --help           show this help

With Postgres (--database-url) the store is not in the data dir: back it up
with pg_dump (docs/postgres.md, docs/operations.md).

Restore with 'locale2b restore <dest> --data-dir DIR'.
`;

const CMD = "backup";

export function postgresRefusal(command: string): CliError {
  return new CliError(
    `this server keeps its store in Postgres (LOCALE2B_DATABASE_URL / --database-url): ${command} covers a data dir's SQLite store only. ` +
      "Back the database up with pg_dump (pg_dump --format=custom ...; restore with pg_restore), and copy the data dir's snapshots/ and paused/ folders: docs/operations.md",
    2,
  );
}

/** What `backup` and `restore` are given: the data dir, the one folder named, the flags. */
export interface DataDirFolderArgs {
  dataDir: string;
  folder: string;
  force: boolean;
  json: boolean;
}

/**
 * Parses `<command> [--data-dir DIR] [--force] [--json] FOLDER` (`folder` says
 * what FOLDER is, for the error); undefined after printing `help` for --help.
 * A Postgres store is refused: these commands cover a data dir's SQLite.
 */
export function parseDataDirFolder(command: "backup" | "restore", args: string[], folder: string, help: string): DataDirFolderArgs | undefined {
  const { values, positionals } = parse(command, {
    args,
    allowPositionals: true,
    options: {
      "data-dir": { type: "string", short: "d" },
      "database-url": { type: "string" },
      ...(command === "restore" ? { force: { type: "boolean" as const } } : {}),
      json: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(help);
    return undefined;
  }
  if (values["database-url"] || setting("LOCALE2B_DATABASE_URL")) throw postgresRefusal(`locale2b ${command}`);
  if (positionals.length !== 1) throw new UsageError(`expected one ${folder}, got ${positionals.length ? positionals.join(" ") : "nothing"}`, command);
  return { dataDir: resolveDataDir(values["data-dir"]), folder: positionals[0]!, force: (values as { force?: boolean }).force === true, json: values.json === true };
}

export async function runBackupCommand(args: string[]): Promise<number> {
  const a = parseDataDirFolder(CMD, args, "destination folder", HELP);
  if (!a) return 0;
  const { dataDir, folder: dest } = a;
  let manifest;
  try {
    manifest = await backupDataDir(dataDir, dest, (line) => process.stderr.write(`locale2b backup: ${line}\n`));
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  if (a.json) {
    process.stdout.write(`${JSON.stringify(manifest, null, 2)}\n`);
  } else {
    const c = manifest.counts;
    const states = Object.entries(c.sandboxes).map(([s, n]) => `${n} ${s}`).join(", ") || "none";
    process.stdout.write(
      `backed up ${manifest.source} into ${dest} (as of ${manifest.createdAt}): ${c.apiKeys} API key(s), ${c.templates} template(s), ` +
        `${c.snapshots} snapshot(s), sandboxes: ${states} (${c.pausedToDisk} paused to disk, with their files)\n`,
    );
  }
  for (const note of manifest.notes) process.stderr.write(`locale2b backup: note: ${note}\n`);
  return 0;
}
