// `locale2b restore`: puts a backup (backup.ts) into a data dir no server
// holds. The stores and the snapshot and paused-to-disk folders are copied
// in; the folders hold their template images again (images/image-refs.ts),
// so the image cache keeps what they start on.
// Sandboxes that were running when the backup was taken: restored into the
// data dir the backup came from, the next `serve` re-adopts those still
// running (as after any restart) and marks the others gone. Restored into
// another data dir, their processes still belong to the first one (which
// may even be serving them now): the restored store records them as killed,
// so that the new server never adopts, times out or kills another server's
// sandboxes.
import { copyFileSync, existsSync, mkdirSync, readdirSync, realpathSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { DB_FILE, dbPath } from "../config.js";
import { heldImage, holdImage } from "../images/image-refs.js";
import { isPausedToDisk } from "../manager/fs-pause.js";
import { ACTIVITY_DB_FILE } from "../store/activity-db.js";
import { liveOwner, SqliteStore } from "../store/sqlite-store.js";
import { copyTree } from "./copy-tree.js";
import { readManifest, type BackupManifest } from "./manifest.js";
import { integrityCheck } from "./sqlite-copy.js";

/** A restore refused before it changed anything (a live server, state in the way). */
export class RestoreRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RestoreRefused";
  }
}

export interface RestoreResult {
  manifest: BackupManifest;
  dataDir: string;
  /** Restored into the data dir the backup was taken from. */
  inPlace: boolean;
  /** Where the data dir's earlier state was moved (--force), if it had any. */
  movedAside?: string;
  /** Sandboxes recorded as killed because their instances belong to the backup's data dir. */
  detached: string[];
  /** Live sandboxes the restored store has: running ones (re-adopted at start when still running), paused ones. */
  sandboxes: number;
  notes: string[];
}

/** What of a data dir a restore would replace. */
const STATE = [DB_FILE, `${DB_FILE}-journal`, ACTIVITY_DB_FILE, `${ACTIVITY_DB_FILE}-journal`, "snapshots", "paused"];

function hasState(dataDir: string): string[] {
  return STATE.filter((name) => {
    const p = join(dataDir, name);
    if (!existsSync(p)) return false;
    if (name === "snapshots" || name === "paused") return readdirSync(p).length > 0;
    return true;
  });
}

function samePath(a: string, b: string): boolean {
  const real = (p: string) => {
    try {
      return realpathSync(p);
    } catch {
      return resolve(p);
    }
  };
  return real(a) === real(b);
}

/**
 * Restores the backup folder `src` into `dataDir`. Refuses (RestoreRefused)
 * a data dir a live server holds, and one that has state already unless
 * `force` (which moves that state into `<dataDir>/pre-restore-<time>/`).
 */
export async function restoreDataDir(src: string, dataDir: string, o: { force?: boolean } = {}): Promise<RestoreResult> {
  const from = resolve(src);
  const target = resolve(dataDir);
  const manifest = readManifest(from);
  for (const db of manifest.databases) {
    const verdict = integrityCheck(join(from, db));
    if (verdict !== "ok") throw new Error(`the backup's ${db} is damaged (SQLite integrity_check: ${verdict.slice(0, 300)})`);
  }
  for (const rel of manifest.folders) {
    if (!existsSync(join(from, rel))) throw new Error(`the backup is incomplete: ${rel} is missing from ${from}`);
  }

  const owner = liveOwner(dbPath(target));
  if (owner) {
    throw new RestoreRefused(
      `the data directory ${target} is in use by a running locale2b server (pid ${owner}): stop it first (systemctl stop locale2b, or Ctrl-C), then restore. Its sandboxes keep running and are re-adopted when it starts again.`,
    );
  }
  const existing = existsSync(target) ? hasState(target) : [];
  if (existing.length && !o.force) {
    throw new RestoreRefused(`${target} already holds locale2b state (${existing.join(", ")}): pass --force to replace it (it is moved to ${target}/pre-restore-<time>/, not deleted), or restore into another --data-dir`);
  }

  mkdirSync(target, { recursive: true, mode: 0o700 });
  // Ours while we work: a server started meanwhile refuses this data dir (SqliteStore's ownership check).
  writeFileSync(`${dbPath(target)}.owner`, `${process.pid}\n`);
  try {
    let movedAside: string | undefined;
    if (existing.length) {
      movedAside = join(target, `pre-restore-${new Date().toISOString().replace(/[:.]/g, "-")}`);
      mkdirSync(movedAside, { mode: 0o700 });
      for (const name of existing) renameSync(join(target, name), join(movedAside, name));
    }
    for (const db of manifest.databases) {
      const tmp = join(target, `${db}.restoring`);
      copyFileSync(join(from, db), tmp);
      renameSync(tmp, join(target, db));
    }
    const notes: string[] = [];
    for (const rel of manifest.folders) {
      const dest = join(target, rel);
      rmSync(dest, { recursive: true, force: true });
      await copyTree(join(from, rel), dest);
      // The image these files sit on: held again from their new place, so a prune keeps it.
      const image = heldImage(dest);
      if (!image) continue;
      if (existsSync(image)) holdImage(image, dest);
      else notes.push(`${rel} needs the template image ${image}, which is not on this host: it cannot start until that image is back (docs/operations.md)`);
    }

    const inPlace = samePath(manifest.source, target);
    const detached: string[] = [];
    const store = new SqliteStore(dbPath(target));
    let sandboxes = 0;
    try {
      for (const rec of await store.listSandboxes()) {
        if (inPlace || isPausedToDisk(rec)) {
          sandboxes++;
          continue;
        }
        await store.putSandbox({
          ...rec,
          state: "killed",
          endReason: `restored from a backup of ${manifest.source}: its instance stays with that data dir`,
          endAt: Math.min(rec.endAt, Date.now()),
        });
        detached.push(rec.id);
      }
    } finally {
      await store.close();
    }
    return { manifest, dataDir: target, inPlace, ...(movedAside ? { movedAside } : {}), detached, sandboxes, notes };
  } finally {
    rmSync(`${dbPath(target)}.owner`, { force: true });
  }
}
