// Snapshots: what one holds, where a runtime reads it back, and the record the store keeps.
import type { SandboxBoot } from "./template.js";

/**
 * What a snapshot holds: `filesystem`, the sandbox's writable layer (its
 * sandboxes start fresh processes on those files, as E2B's filesystem-only
 * mode); `memory`, that and the running state (processes continue).
 */
export type SnapshotKind = "filesystem" | "memory";

/** A snapshot on disk, as a runtime reads it back: the directory its instance's snapshot() wrote. */
export interface SnapshotSource {
  kind: SnapshotKind;
  dir: string;
  /** The runtime that took it (only that runtime can start from it). */
  runtime: string;
  /**
   * The sandbox it was taken from. A memory snapshot's envd still holds that
   * sandbox's access token until the new sandbox's /init replaces it.
   */
  sandboxId?: string;
}

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
  /** What that sandbox booted (absent in older records: the image is `templateId`). */
  boot?: SandboxBoot;
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
  /** The host whose disk holds its files, in a fleet or on a shared Postgres store (absent on one box). */
  node?: string;
}

export interface SnapshotFilter {
  sandboxId?: string;
}
