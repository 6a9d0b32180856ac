import type { SandboxRecord } from "../domain/sandbox.js";

/** Metadata key of a sandbox listing the env var names whose values are secret (comma-separated). */
export const SECRET_ENV_METADATA = "locale2b.secret_env";

/** Env var names whose values are treated as secret even when nobody said so. */
const SECRET_NAME = /(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION)/i;

/** API keys, wherever they show up. */
const API_KEY = /e2b_[0-9a-f]{40}/g;

/** Shorter values are too likely to be ordinary words or numbers to be redacted everywhere. */
const MIN_SECRET_LENGTH = 4;

/** Per-request secrets kept per sandbox (the oldest go first): a bound on what a long-lived sandbox costs. */
const MAX_ADDED_SECRETS = 1000;

export const REDACTED = "[REDACTED]";

/** The env var names of a sandbox that are secret: marked so, or named like a secret. */
export function secretEnvNames(rec: Pick<SandboxRecord, "envVars" | "metadata">): string[] {
  const marked = new Set(
    (rec.metadata[SECRET_ENV_METADATA] ?? "")
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean),
  );
  return Object.keys(rec.envVars).filter((k) => marked.has(k) || SECRET_NAME.test(k));
}

/**
 * Removes secrets from text that goes to the event stream, the audit log or
 * the logs (commands, paths, error messages): every API key, and per
 * sandbox its access tokens and the values of its secret env vars (and of
 * secret env given to one command).
 */
export class Redactor {
  /** From the sandbox's record: its tokens and secret env values. */
  private readonly recorded = new Map<string, Set<string>>();
  /** Brought by requests (an exec's secret_env), at most MAX_ADDED_SECRETS per sandbox. */
  private readonly added = new Map<string, Set<string>>();

  /** (Re)computes a sandbox's secrets from its record. */
  remember(rec: SandboxRecord): void {
    const values = [rec.envdAccessToken, rec.trafficAccessToken, ...secretEnvNames(rec).map((n) => rec.envVars[n]!)];
    this.recorded.set(rec.id, new Set(values.filter((v) => typeof v === "string" && v.length >= MIN_SECRET_LENGTH)));
  }

  /** Secrets one request brought (e.g. an exec's secret env). */
  add(sandboxId: string, values: string[]): void {
    let set = this.added.get(sandboxId);
    if (!set) this.added.set(sandboxId, (set = new Set()));
    for (const v of values) {
      if (v.length < MIN_SECRET_LENGTH) continue;
      set.delete(v);
      set.add(v);
    }
    for (const old of set) {
      if (set.size <= MAX_ADDED_SECRETS) break;
      set.delete(old);
    }
  }

  forget(sandboxId: string): void {
    this.recorded.delete(sandboxId);
    this.added.delete(sandboxId);
  }

  redact(text: string, sandboxId?: string): string {
    let out = text.includes("e2b_") ? text.replace(API_KEY, REDACTED) : text;
    if (!sandboxId) return out;
    for (const secrets of [this.recorded.get(sandboxId), this.added.get(sandboxId)]) {
      if (secrets) for (const s of secrets) if (out.includes(s)) out = out.split(s).join(REDACTED);
    }
    return out;
  }
}
