// `locale2b restore <src>`: a backup into a data dir no server holds
// (control-plane/backup/restore.ts).
import { restoreDataDir, RestoreRefused } from "../backup/restore.js";
import { defaultDataDir } from "../config.js";
import { CliError } from "./args.js";
import { parseDataDirFolder } from "./backup-command.js";

const HELP = `Usage: locale2b restore <src> [options]

Restores the backup folder <src> (made by 'locale2b backup') into a data dir.
The data dir's server must be stopped: a data dir a running server holds is
refused. Then start the server on it.

Into the data dir the backup came from, the server re-adopts the backup's
sandboxes that are still running (as after any restart). Into another data
dir, those sandboxes' processes stay with the first one: the restored store
lists them as killed. Sandboxes paused to disk and snapshots come back whole,
as do API keys and templates.

Options:
  -d, --data-dir DIR   the data dir to restore into (default: $LOCALE2B_DATA_DIR,
                       or ${defaultDataDir()})
      --force          replace the state the data dir has (it is moved into
                       <data dir>/pre-restore-<time>/, not deleted)
      --json           print what was restored as JSON
  -h, --help           show this help
`;

const CMD = "restore";

export async function runRestoreCommand(args: string[]): Promise<number> {
  const a = parseDataDirFolder(CMD, args, "backup folder", HELP);
  if (!a) return 0;
  const { dataDir } = a;
  let result;
  try {
    result = await restoreDataDir(a.folder, dataDir, { force: a.force });
  } catch (err) {
    throw new CliError((err as Error).message, err instanceof RestoreRefused ? 3 : 1);
  }
  if (a.json) {
    process.stdout.write(`${JSON.stringify({ ...result, manifest: undefined, source: result.manifest.source, createdAt: result.manifest.createdAt }, null, 2)}\n`);
  } else {
    const c = result.manifest.counts;
    const lines = [
      `restored the backup of ${result.manifest.source} (as of ${result.manifest.createdAt}) into ${result.dataDir}: ${c.apiKeys} API key(s), ${c.templates} template(s), ${c.snapshots} snapshot(s), ${result.sandboxes} live sandbox(es)`,
    ];
    if (result.movedAside) lines.push(`the data dir's earlier state is in ${result.movedAside}`);
    if (result.inPlace) lines.push("restored in place: the next start re-adopts the backup's sandboxes that are still running and marks the others gone");
    else if (result.detached.length) {
      lines.push(`${result.detached.length} sandbox(es) that were running in ${result.manifest.source} are recorded as killed here (their processes belong to that data dir)`);
    }
    lines.push(`start the server: locale2b serve --data-dir ${result.dataDir}`);
    process.stdout.write(`${lines.join("\n")}\n`);
  }
  for (const note of result.notes) process.stderr.write(`locale2b restore: note: ${note}\n`);
  return 0;
}
