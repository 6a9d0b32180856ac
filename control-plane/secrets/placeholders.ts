// `${e2b.secrets.<name>}` in a header value (what the SDKs' Secret.fill(name)
// makes) becomes the secret's current value, for the egress proxy. A name the
// team has no secret for is an error: a placeholder never goes out as it is.
import type { AuditLog } from "../audit/audit-log.js";
import { ControlPlaneError } from "../domain/errors.js";
import type { SecretService } from "./secret-service.js";

const OPEN = "${e2b.secrets.";
const PLACEHOLDER = /\$\{e2b\.secrets\.([^{}]*)\}/g;
/** What a header value must not get from a secret: it would end the header or smuggle another. */
const NOT_IN_HEADER = /[\r\n\0]/;

export interface SecretUse {
  secretId: string;
  name: string;
  version: number;
}

/** Where uses are audited (by name and version), and on whose behalf. */
export interface UseAudit {
  log: AuditLog;
  actor: string;
  sandboxId?: string;
}

export function hasSecretPlaceholder(value: string): boolean {
  return value.includes(OPEN);
}

/**
 * `headerValue` with every placeholder replaced by the current version of
 * the team's secret of that name, and which versions were used. Throws a
 * ControlPlaneError (`not_found` for an unknown name, `invalid` for a
 * malformed placeholder or a value a header cannot carry) naming the secret,
 * never quoting a value.
 */
export async function resolveSecretPlaceholders(
  secrets: SecretService,
  team: string,
  headerValue: string,
  audit?: UseAudit,
): Promise<{ value: string; used: SecretUse[] }> {
  if (!hasSecretPlaceholder(headerValue)) return { value: headerValue, used: [] };
  const names = [...headerValue.matchAll(PLACEHOLDER)].map((m) => m[1]!);
  // An opening with no closing brace (or a brace inside the name) would otherwise go out as it is.
  if (headerValue.split(OPEN).length - 1 !== names.length) {
    throw new ControlPlaneError("invalid", "a header has a malformed secret placeholder: write it as ${e2b.secrets.<name>} (Secret.fill(name) makes one)");
  }
  const values = new Map<string, { value: string; use: SecretUse }>();
  for (const name of new Set(names)) {
    if (name === "") throw new ControlPlaneError("invalid", "a header has a secret placeholder without a name: ${e2b.secrets.<name>}");
    const found = await secrets.reveal(team, name);
    if (!found) throw new ControlPlaneError("not_found", `a header refers to secret '${name}', which does not exist: create it (Secret.create) or fix the name`);
    if (NOT_IN_HEADER.test(found.value)) {
      throw new ControlPlaneError("invalid", `secret '${found.record.name}' (version ${found.record.currentVersion}) holds a line break or NUL, which a header cannot carry: update it`);
    }
    values.set(name, { value: found.value, use: { secretId: found.record.id, name: found.record.name, version: found.record.currentVersion } });
  }
  const value = headerValue.replace(PLACEHOLDER, (_, name: string) => values.get(name)!.value);
  const used = [...values.values()].map((v) => v.use);
  for (const u of used) {
    audit?.log.record({
      actor: audit.actor,
      api: "system",
      action: "secret.used",
      ...(audit.sandboxId ? { sandbox_id: audit.sandboxId } : {}),
      result: "ok",
      details: { secret_id: u.secretId, name: u.name, version: u.version },
    });
  }
  return { value, used };
}
