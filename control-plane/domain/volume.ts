/**
 * E2B's volumes: storage that outlives sandboxes, mounted into any number of
 * them at once (`volumeMounts` at create) and reached from outside through
 * the volume file API (`/volumecontent/<id>/…`).
 */
export interface VolumeRecord {
  /** `vol_` + lowercase alphanumerics. */
  id: string;
  /** Unique; E2B's pattern `^[a-zA-Z0-9_-]+$`. */
  name: string;
  /** Its size limit: writing past it is ENOSPC, inside a sandbox and through the file API. */
  sizeMB: number;
  /** ms since epoch */
  createdAt: number;
  /** The host whose disk holds it, in a fleet or on a shared Postgres store (absent on one box). */
  node?: string;
}

/** A mount a sandbox was created with: the volume by name (as E2B's API takes it) at `path` inside. */
export interface VolumeMount {
  name: string;
  path: string;
}

/** What a runtime mounts: a volume's host directory at `path` inside the sandbox. */
export interface VolumeBinding {
  volumeId: string;
  name: string;
  hostPath: string;
  path: string;
}

export const VOLUME_NAME = /^[a-zA-Z0-9_-]+$/;
export const VOLUME_NAME_MAX = 64;

/** Why `name` cannot name a volume, or undefined when it can. */
export function volumeNameProblem(name: unknown): string | undefined {
  if (typeof name !== "string" || name === "") return "a volume needs a name: letters, digits, '_' and '-'";
  if (name.length > VOLUME_NAME_MAX) return `volume name '${name.slice(0, 20)}…' is ${name.length} characters long: at most ${VOLUME_NAME_MAX}`;
  if (!VOLUME_NAME.test(name)) return `invalid volume name '${name}': use only letters, digits, '_' and '-' (E2B's pattern ^[a-zA-Z0-9_-]+$)`;
  return undefined;
}

/** Where a volume may not be mounted: the sandbox's root and the kernel's own trees. */
const RESERVED = ["/proc", "/sys", "/dev"];

/** Why `path` cannot be a mount point inside a sandbox, or undefined when it can. */
export function mountPathProblem(path: unknown): string | undefined {
  if (typeof path !== "string" || path === "") return "a volume mount needs a path inside the sandbox, e.g. /mnt/data";
  if (!path.startsWith("/")) return `mount path '${path}' must be absolute, e.g. /mnt/data`;
  if (path.includes("\0")) return "mount path must not contain NUL";
  const parts = path.split("/").filter(Boolean);
  if (parts.some((p) => p === "." || p === "..")) return `mount path '${path}' must not contain '.' or '..'`;
  if (parts.length === 0) return "a volume cannot be mounted at '/': pick a directory, e.g. /mnt/data";
  const norm = `/${parts.join("/")}`;
  if (RESERVED.some((r) => norm === r || norm.startsWith(`${r}/`))) return `a volume cannot be mounted at '${path}' (under ${RESERVED.join(", ")}): pick another directory, e.g. /mnt/data`;
  if (norm.length > 1024) return "mount path is too long (at most 1024 characters)";
  return undefined;
}

/** `path` as one normal form (no doubled or trailing '/'); call after mountPathProblem. */
export function normalMountPath(path: string): string {
  return `/${path.split("/").filter(Boolean).join("/")}`;
}
