// `locale2b backup`: an online, consistent copy of a data dir's state while
// its server runs. The stores are copied first, each in one SQLite read
// transaction (sqlite-copy.ts): the backup shows the sandboxes, keys,
// templates and snapshots of that instant. Then the files those records need
// are copied: each snapshot's folder and each sandbox paused to disk's
// folder. Both are renamed into place complete before their record names
// them, and never change after, so a plain copy of them is consistent; one
// removed meanwhile (a snapshot deleted, a sandbox resumed) leaves the
// backup, and its record with it, with a note.
// Not in a backup: running sandboxes' processes and memory (sandboxes/, their
// records are kept: a restore in place re-adopts the ones still running),
// the template image cache (images/: per host, rebuilt; see docs/operations.md),
// and what is only transient (template-builds/, template-files/, sessions/).
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DB_FILE, dbPath } from "../config.js";
import { isPausedToDisk } from "../manager/fs-pause.js";
import { ACTIVITY_DB_FILE } from "../store/activity-db.js";
import { SqliteStore } from "../store/sqlite-store.js";
import { copyTree } from "./copy-tree.js";
import { BACKUP_FORMAT, BACKUP_VERSION, MANIFEST_FILE, type BackupManifest } from "./manifest.js";
import { copyDatabase } from "./sqlite-copy.js";

export interface BackupProgress {
  (line: string): void;
}

function packageVersion(): string {
  // control-plane/backup/ from the sources, dist/control-plane/backup/ once built.
  for (const up of ["../../package.json", "../../../package.json"]) {
    try {
      const pkg = JSON.parse(readFileSync(fileURLToPath(new URL(up, import.meta.url)), "utf8")) as { name?: string; version?: string };
      if (pkg.name === "locale2b" && pkg.version) return pkg.version;
    } catch {
      // not there
    }
  }
  return "unknown";
}

/** An empty or missing folder may receive a backup; anything else is refused. */
function checkDest(dest: string): void {
  if (!existsSync(dest)) return;
  let entries: string[];
  try {
    entries = readdirSync(dest);
  } catch {
    throw new Error(`${dest} exists and is not a folder: give a new folder to back up into`);
  }
  if (entries.length) throw new Error(`${dest} is not empty: give a new (or empty) folder to back up into`);
}

/**
 * Backs up the data dir `dataDir` into the new folder `dest` and returns its
 * manifest. Written under a temporary name and renamed into place: a folder
 * at `dest` is a complete backup.
 */
export async function backupDataDir(dataDir: string, dest: string, progress: BackupProgress = () => {}): Promise<BackupManifest> {
  const source = resolve(dataDir);
  const target = resolve(dest);
  if (!existsSync(dbPath(source))) {
    throw new Error(`no locale2b store in ${source} (no ${DB_FILE}): pass the server's --data-dir`);
  }
  if (target === source || target.startsWith(`${source}/`)) throw new Error(`back up to a folder outside the data dir ${source}`);
  checkDest(target);
  const tmp = `${target}.partial-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true, mode: 0o700 });
  try {
    const createdAt = new Date().toISOString();
    copyDatabase(dbPath(source), join(tmp, DB_FILE));
    progress(`copied ${DB_FILE}`);
    const databases = [DB_FILE];
    if (existsSync(join(source, ACTIVITY_DB_FILE))) {
      copyDatabase(join(source, ACTIVITY_DB_FILE), join(tmp, ACTIVITY_DB_FILE));
      databases.push(ACTIVITY_DB_FILE);
      progress(`copied ${ACTIVITY_DB_FILE}`);
    }
    const manifest = await copyFolders(source, tmp, progress);
    const full: BackupManifest = { format: BACKUP_FORMAT, version: BACKUP_VERSION, createdAt, source, host: hostname(), locale2bVersion: packageVersion(), databases, ...manifest };
    writeFileSync(join(tmp, MANIFEST_FILE), `${JSON.stringify(full, null, 2)}\n`, { mode: 0o600 });
    if (existsSync(target)) rmSync(target, { recursive: true }); // empty (checkDest)
    renameSync(tmp, target);
    return full;
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
}

/** Copies the folders the copied store's records need; drops the records whose folder went meanwhile. */
async function copyFolders(source: string, tmp: string, progress: BackupProgress): Promise<Pick<BackupManifest, "schemaVersions" | "folders" | "counts" | "notes">> {
  const store = new SqliteStore(join(tmp, DB_FILE));
  try {
    const folders: string[] = [];
    const notes: string[] = [];
    const gone = (rel: string) => !existsSync(join(source, rel));
    const copy = async (rel: string): Promise<boolean> => {
      try {
        await copyTree(join(source, rel), join(tmp, rel));
        folders.push(rel);
        return true;
      } catch (err) {
        rmSync(join(tmp, rel), { recursive: true, force: true });
        if (gone(rel)) return false;
        throw new Error(`cannot copy ${join(source, rel)}: ${(err as Error).message}`);
      }
    };

    const snapshots = await store.listSnapshots();
    const builds = new Map<string, boolean>();
    for (const s of snapshots) {
      const rel = join("snapshots", s.build);
      if (!builds.has(rel)) builds.set(rel, await copy(rel));
      if (!builds.get(rel)) {
        await store.deleteSnapshot(s.id, s.tag);
        notes.push(`snapshot ${s.id}:${s.tag} was deleted while the backup ran: not in it`);
      }
    }
    if (builds.size) progress(`copied ${[...builds.values()].filter(Boolean).length} snapshot folder(s)`);

    const live = await store.listSandboxes();
    let pausedToDisk = 0;
    for (const rec of live) {
      if (!isPausedToDisk(rec)) continue;
      if (await copy(join("paused", rec.id))) {
        pausedToDisk++;
        continue;
      }
      // Resumed (or killed) after the store was copied: its files are no longer a pause to disk.
      await store.putSandbox({ ...rec, state: "killed", endReason: "its paused files changed while the backup ran (it was resumed or killed)", endAt: Math.min(rec.endAt, Date.now()) });
      notes.push(`sandbox ${rec.id} was resumed or killed while the backup ran: its paused files are not in it`);
    }
    if (pausedToDisk) progress(`copied ${pausedToDisk} sandbox(es) paused to disk`);

    const sandboxes: Record<string, number> = {};
    for (const rec of await store.listSandboxes()) sandboxes[rec.state] = (sandboxes[rec.state] ?? 0) + 1;
    return {
      schemaVersions: await store.schemaVersions(),
      folders,
      counts: {
        apiKeys: (await store.listApiKeys()).length,
        templates: (await store.listTemplates()).length,
        snapshots: (await store.listSnapshots()).length,
        sandboxes,
        pausedToDisk,
      },
      notes,
    };
  } finally {
    await store.close();
  }
}
