/**
 * Operations the workspace API audits itself (with the caller's key) and
 * that envd then reports again as activity: a file it reads or writes for
 * the caller. A claim makes the audit log skip envd's report of it, so the
 * operation is recorded once, attributed to the key rather than to
 * `envd-token`. Claims are made only by the control plane, so a client
 * cannot hide its own operations with them; unused ones expire.
 */
export class AuditClaims {
  private readonly claims = new Map<string, { count: number; expires: number }>();

  constructor(private readonly ttlMs = 60_000) {}

  private key(sandboxId: string, kind: string, path: string): string {
    return `${sandboxId}\0${kind}\0${path}`;
  }

  claim(sandboxId: string, kind: "file.read" | "file.written", path: string): void {
    const k = this.key(sandboxId, kind, path);
    const c = this.claims.get(k);
    this.claims.set(k, { count: (c?.count ?? 0) + 1, expires: Date.now() + this.ttlMs });
    if (this.claims.size > 10_000) this.sweep();
  }

  /** True (and the claim used up) when the control plane claimed this operation. */
  take(sandboxId: string, kind: string, path: string): boolean {
    const k = this.key(sandboxId, kind, path);
    const c = this.claims.get(k);
    if (!c || c.expires < Date.now()) return false;
    if (--c.count <= 0) this.claims.delete(k);
    return true;
  }

  private sweep(): void {
    const now = Date.now();
    for (const [k, c] of this.claims) if (c.expires < now) this.claims.delete(k);
  }
}
