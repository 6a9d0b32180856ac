import type { SnapshotKind } from "../runtimes/runtime.js";

/**
 * One snapshot as the store keeps it. E2B models a snapshot as a template
 * build: `id` is the snapshot template's id, `tag` its tag (`default`
 * unless the name carried one), `name` the alias a user gave it (unique per
 * tag; taking a snapshot under a name that exists replaces that build).
 */
export interface SnapshotRecord {
  id: string;
  tag: string;
  name?: string;
  /** The sandbox it was taken from. */
  sandboxId: string;
  /** The template that sandbox ran (its files are the snapshot's lower layer). */
  templateId: string;
  runtime: string;
  kind: SnapshotKind;
  /** The build's directory name under `<data dir>/snapshots/`. */
  build: string;
  /** ms since epoch */
  createdAt: number;
  sizeBytes: number;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
}

export interface SnapshotFilter {
  sandboxId?: string;
}
