import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** A signed-in browser: the key it signed in with stays here, in the server's memory, never in the browser. */
export interface DashboardSession {
  /** The API key itself: each API call the session makes is made with it (a revoked key stops the session). */
  key: string;
  keyId: string;
  /** Sent back by the page in X-CSRF-Token on every state-changing call. */
  csrf: string;
  createdAt: number;
  lastSeen: number;
}

export interface SessionLimits {
  /** A session unused this long ends. */
  idleMs: number;
  /** A session ends this long after sign-in, used or not. */
  maxAgeMs: number;
}

export const DEFAULT_SESSION_LIMITS: SessionLimits = { idleMs: 8 * 3600_000, maxAgeMs: 24 * 3600_000 };

/** Session ids are kept hashed: a heap dump or a timing probe of the map does not give a usable cookie. */
function digest(id: string): string {
  return createHash("sha256").update(id).digest("base64url");
}

/**
 * The dashboard's sessions: a random 256-bit id per sign-in (the cookie's
 * value), held in memory with an idle and an absolute expiry. A restart of
 * the server signs every browser out.
 */
export class DashboardSessions {
  private readonly byDigest = new Map<string, DashboardSession>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly limits: SessionLimits = DEFAULT_SESSION_LIMITS,
    private readonly now: () => number = Date.now,
  ) {
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  /** A new session for a verified key: its id (the cookie) and the session. */
  create(key: string, keyId: string): { id: string; session: DashboardSession } {
    const id = randomBytes(32).toString("base64url");
    const t = this.now();
    const session: DashboardSession = { key, keyId, csrf: randomBytes(32).toString("base64url"), createdAt: t, lastSeen: t };
    this.byDigest.set(digest(id), session);
    return { id, session };
  }

  /** The live session with this id (and it counts as used), or undefined. */
  get(id: string | undefined): DashboardSession | undefined {
    if (!id) return undefined;
    const d = digest(id);
    const s = this.byDigest.get(d);
    if (!s) return undefined;
    const t = this.now();
    if (this.expired(s, t)) {
      this.byDigest.delete(d);
      return undefined;
    }
    s.lastSeen = t;
    return s;
  }

  /** Signs out: the id is no longer accepted. */
  delete(id: string): void {
    this.byDigest.delete(digest(id));
  }

  /** When the session ends if unused from now on. */
  expiresAt(s: DashboardSession): number {
    return Math.min(s.lastSeen + this.limits.idleMs, s.createdAt + this.limits.maxAgeMs);
  }

  get size(): number {
    return this.byDigest.size;
  }

  close(): void {
    clearInterval(this.sweeper);
    this.byDigest.clear();
  }

  private expired(s: DashboardSession, t: number): boolean {
    return t >= this.expiresAt(s);
  }

  private sweep(): void {
    const t = this.now();
    for (const [d, s] of this.byDigest) if (this.expired(s, t)) this.byDigest.delete(d);
  }
}

/** Constant-time comparison of a CSRF token the page sent with the session's. */
export function csrfMatches(session: DashboardSession, sent: string | string[] | undefined): boolean {
  if (typeof sent !== "string") return false;
  const a = Buffer.from(sent);
  const b = Buffer.from(session.csrf);
  return a.length === b.length && timingSafeEqual(a, b);
}
