import { describe, expect, it } from "vitest";
import { csrfMatches, DashboardSessions } from "../../control-plane/api/dashboard/sessions.js";

// The dashboard's session table on its own, with a clock the test moves: idle and absolute expiry, sign-out.

describe("dashboard sessions", () => {
  it("end after the idle time, after the absolute lifetime however used, and on delete", () => {
    let now = 1_000_000;
    const sessions = new DashboardSessions({ idleMs: 1000, maxAgeMs: 5000 }, () => now);
    try {
      const a = sessions.create("e2b_key", "key_1");
      expect(a.id).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(sessions.get(a.id)?.keyId).toBe("key_1");
      expect(sessions.get(undefined)).toBeUndefined();
      expect(sessions.get(`${a.id}x`)).toBeUndefined();
      // Used every 900 ms it lives on, but never past 5 s from sign-in.
      for (let t = 900; t < 5000; t += 900) {
        now = 1_000_000 + t;
        expect(sessions.get(a.id), `at ${t} ms`).toBeDefined();
      }
      now = 1_000_000 + 5000;
      expect(sessions.get(a.id)).toBeUndefined();

      const b = sessions.create("e2b_key", "key_1");
      now += 1000;
      expect(sessions.get(b.id)).toBeUndefined(); // idle for 1 s

      const c = sessions.create("e2b_key", "key_1");
      expect(sessions.expiresAt(c.session)).toBe(now + 1000);
      sessions.delete(c.id);
      expect(sessions.get(c.id)).toBeUndefined();
      expect(sessions.size).toBe(0);
    } finally {
      sessions.close();
    }
  });

  it("compare CSRF tokens exactly", () => {
    const sessions = new DashboardSessions();
    try {
      const { session } = sessions.create("e2b_key", "key_1");
      expect(csrfMatches(session, session.csrf)).toBe(true);
      expect(csrfMatches(session, `${session.csrf}x`)).toBe(false);
      expect(csrfMatches(session, session.csrf.slice(1))).toBe(false);
      expect(csrfMatches(session, undefined)).toBe(false);
      expect(csrfMatches(session, [session.csrf])).toBe(false);
      // Two sessions never share an id or a token.
      const other = sessions.create("e2b_key", "key_1");
      expect(other.session.csrf).not.toBe(session.csrf);
    } finally {
      sessions.close();
    }
  });
});
