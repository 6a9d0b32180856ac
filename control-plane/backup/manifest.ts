// What a backup folder holds (`locale2b backup`), described by its
// manifest.json: read by `locale2b restore`, and by a person.
import { readFileSync } from "node:fs";
import { join } from "node:path";

export const MANIFEST_FILE = "manifest.json";
export const BACKUP_FORMAT = "locale2b-backup";
export const BACKUP_VERSION = 1;

export interface BackupManifest {
  format: typeof BACKUP_FORMAT;
  version: typeof BACKUP_VERSION;
  /** ISO time the store was copied (the instant the backup shows). */
  createdAt: string;
  /** The data dir it was taken from (absolute): a restore there may re-adopt its running sandboxes. */
  source: string;
  host: string;
  /** locale2b's package version that took it. */
  locale2bVersion: string;
  /** The store's schema versions (locale2b.db). */
  schemaVersions: number[];
  /** SQLite files in the folder (locale2b.db, activity.db when the server had one). */
  databases: string[];
  /** Folders copied from the data dir, relative: snapshots/<build>, paused/<id>. */
  folders: string[];
  counts: {
    apiKeys: number;
    templates: number;
    snapshots: number;
    /** Live sandboxes by state at that instant (paused includes paused to disk). */
    sandboxes: Record<string, number>;
    /** Of those, paused to disk: their files are in the backup. */
    pausedToDisk: number;
  };
  /** What the backup could not keep, and why (a snapshot deleted while it ran, ...). */
  notes: string[];
}

/** The manifest of the backup folder `dir`, or an Error saying what is wrong with it. */
export function readManifest(dir: string): BackupManifest {
  let text: string;
  try {
    text = readFileSync(join(dir, MANIFEST_FILE), "utf8");
  } catch {
    throw new Error(`${dir} is not a locale2b backup: it has no ${MANIFEST_FILE} (make one with 'locale2b backup <dest>')`);
  }
  let m: Partial<BackupManifest>;
  try {
    m = JSON.parse(text) as Partial<BackupManifest>;
  } catch {
    throw new Error(`${join(dir, MANIFEST_FILE)} is not JSON: the backup is damaged`);
  }
  if (m.format !== BACKUP_FORMAT) throw new Error(`${dir} is not a locale2b backup (its ${MANIFEST_FILE} says format '${String(m.format)}')`);
  if (m.version !== BACKUP_VERSION) throw new Error(`${dir} is a locale2b backup of format version ${String(m.version)}; this locale2b reads version ${BACKUP_VERSION}`);
  return m as BackupManifest;
}
