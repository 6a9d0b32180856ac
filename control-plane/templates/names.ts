// How templates are named and found, as E2B's template API names them: a
// template has an id (20 lowercase alphanumerics) and names (aliases); a
// reference is an id or a name, optionally `namespace/`-prefixed and with a
// `:tag` (`default` when absent).
import { randomUUID } from "node:crypto";
import { randomId } from "../manager/ids.js";

export const DEFAULT_TAG = "default";
/** This server's one team namespace (as snapshots use it). */
export const NAMESPACE = "local";

const NAME_RE = /^[a-z0-9][a-z0-9._-]{0,127}$/;
const TAG_RE = /^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$/;
const ID_RE = /^[a-z0-9]{20}$/;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface TemplateRef {
  /** An id or a name, without namespace and tag. */
  base: string;
  tag?: string;
}

/** Splits `[namespace/]base[:tag]`, or says what is wrong with it. */
export function parseTemplateRef(raw: string): TemplateRef | { problem: string } {
  const m = /^(?:([^/:]+)\/)?([^/:]+)(?::([^/:]+))?$/.exec(raw);
  if (!m) return { problem: `invalid template name '${printable(raw)}': expected name, name:tag or ${NAMESPACE}/name:tag` };
  if (m[1] !== undefined && m[1] !== NAMESPACE) return { problem: `invalid template name '${printable(raw)}': the namespace of this server is '${NAMESPACE}'` };
  const base = m[2]!;
  if (!NAME_RE.test(base)) {
    return { problem: `invalid template name '${printable(raw)}': a name is 1-128 lowercase letters, digits, '.', '-' or '_', starting with a letter or digit` };
  }
  if (m[3] !== undefined && !TAG_RE.test(m[3])) return { problem: `invalid tag '${printable(m[3])}': a tag is 1-128 letters, digits, '.', '-' or '_', starting with a letter or digit` };
  return { base, ...(m[3] !== undefined ? { tag: m[3] } : {}) };
}

/** Why a tag is refused, or undefined. */
export function tagProblem(tag: string): string | undefined {
  return TAG_RE.test(tag) ? undefined : `invalid tag '${printable(tag)}': a tag is 1-128 letters, digits, '.', '-' or '_', starting with a letter or digit`;
}

/** A value as it may be shown in a message: control characters escaped, at most 160 characters. */
export function printable(s: string): string {
  const shown = JSON.stringify(s.slice(0, 160)).slice(1, -1);
  return s.length > 160 ? `${shown}…` : shown;
}

export function isTemplateId(s: string): boolean {
  return ID_RE.test(s);
}

export function isBuildId(s: string): boolean {
  return UUID_RE.test(s);
}

export function newTemplateId(): string {
  return randomId(20);
}

export function newBuildId(): string {
  return randomUUID();
}

/** A build id for a template built from a definition on the server: a UUID made from its image's hash, so it is stable. */
export function builtInBuildId(hash: string): string {
  const h = hash.padEnd(32, "0");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
