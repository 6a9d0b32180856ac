// How snapshots are named and found, as E2B names snapshot templates:
// `snapshotID` is `<namespace>/<name>:<tag>` for a named snapshot and
// `<id>:<tag>` otherwise; a reference (create from it, delete it, filter
// the list) may be the id or the name, with or without the namespace and
// the tag (`default` when absent).
import type { SnapshotRecord } from "../domain/snapshot.js";

/** This server's one team namespace (E2B's team slug). */
export const SNAPSHOT_NAMESPACE = "local";
export const DEFAULT_TAG = "default";

const NAME_RE = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const TAG_RE = /^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$/;

export interface SnapshotRef {
  namespace?: string;
  base: string;
  tag?: string;
}

/** Splits `[namespace/]base[:tag]`; undefined when it is not of that form. */
export function parseRef(ref: string): SnapshotRef | undefined {
  const m = /^(?:([^/:]+)\/)?([^/:]+)(?::([^/:]+))?$/.exec(ref);
  if (!m) return undefined;
  return { ...(m[1] ? { namespace: m[1] } : {}), base: m[2]!, ...(m[3] ? { tag: m[3] } : {}) };
}

/** Why a snapshot name (as given to create, `name[:tag]`, namespace optional) is refused, or undefined. */
export function nameProblem(ref: SnapshotRef | undefined, raw: string): string | undefined {
  if (!ref) return `invalid snapshot name '${raw}': expected name, name:tag or ${SNAPSHOT_NAMESPACE}/name:tag`;
  if (ref.namespace && ref.namespace !== SNAPSHOT_NAMESPACE) {
    return `invalid snapshot name '${raw}': the namespace of this server is '${SNAPSHOT_NAMESPACE}'`;
  }
  if (!NAME_RE.test(ref.base)) {
    return `invalid snapshot name '${raw}': a name is 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit`;
  }
  if (ref.tag !== undefined && !TAG_RE.test(ref.tag)) return `invalid snapshot tag '${ref.tag}'`;
  return undefined;
}

/** Whether a snapshot answers to a reference (the tag matters only when the reference has one, or `withDefaultTag`). */
export function refMatches(s: SnapshotRecord, ref: SnapshotRef, withDefaultTag: boolean): boolean {
  if (ref.namespace && ref.namespace !== SNAPSHOT_NAMESPACE) return false;
  if (s.id !== ref.base && s.name !== ref.base) return false;
  const tag = ref.tag ?? (withDefaultTag ? DEFAULT_TAG : undefined);
  return tag === undefined || s.tag === tag;
}

/** `SnapshotInfo.snapshotID`. */
export function snapshotId(s: SnapshotRecord): string {
  return s.name ? `${SNAPSHOT_NAMESPACE}/${s.name}:${s.tag}` : `${s.id}:${s.tag}`;
}

/** `SnapshotInfo.names`: the full names (namespace and tag) a snapshot has. */
export function snapshotNames(s: SnapshotRecord): string[] {
  return s.name ? [`${SNAPSHOT_NAMESPACE}/${s.name}:${s.tag}`] : [];
}

/** `SnapshotInfo` as the REST API answers it. */
export function toSnapshotInfo(s: SnapshotRecord): { snapshotID: string; names: string[] } {
  return { snapshotID: snapshotId(s), names: snapshotNames(s) };
}
