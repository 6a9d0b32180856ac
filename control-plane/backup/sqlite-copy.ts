// Consistent copies of a live SQLite database: `VACUUM INTO` reads the whole
// database in one read transaction, so the copy is the database as one
// committed instant left it, whatever the serving control plane writes
// meanwhile (its writes wait for that read; the copy is compact, so this is
// short). Through node-sqlite3-wasm, the same SQLite build the server uses.
import { existsSync, rmSync } from "node:fs";
import sqlite from "node-sqlite3-wasm";

/** How long a copy waits for the server's write transaction to end. */
const BUSY_TIMEOUT_MS = 30_000;

function open(path: string): InstanceType<typeof sqlite.Database> {
  // Read-write (not readOnly): a hot journal left by a crash must be rolled back before anything reads it.
  const db = new sqlite.Database(path, { fileMustExist: true });
  db.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  return db;
}

/** Copies the database at `src` into a new file `dest` (which must not exist). */
export function copyDatabase(src: string, dest: string): void {
  if (existsSync(dest)) throw new Error(`${dest} exists: a backup never overwrites a file`);
  const db = open(src);
  try {
    db.run("VACUUM INTO ?", [dest]);
  } catch (err) {
    rmSync(dest, { force: true });
    throw new Error(`cannot copy ${src}: ${(err as Error).message}`);
  } finally {
    db.close();
  }
}

/** SQLite's own check of a database file: "ok", or what is wrong with it. */
export function integrityCheck(path: string): string {
  const db = open(path);
  try {
    const rows = db.all("PRAGMA integrity_check") as { integrity_check: string }[];
    return rows.map((r) => r.integrity_check).join("; ");
  } finally {
    db.close();
  }
}
