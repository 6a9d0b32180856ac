import type { IncomingMessage } from "node:http";

/**
 * Whether a request comes from the dashboard's own pages: a browser says
 * where a request comes from in Sec-Fetch-Site (every current browser) and
 * Origin (on every POST, DELETE, and cross-origin fetch). A request that
 * says it is cross-site, or carries an Origin that is not this server's
 * host, is refused. Clients that send neither (curl) are not browsers: for
 * them the cookie and the CSRF token are the check.
 */
export function sameOrigin(req: IncomingMessage): { ok: true } | { ok: false; why: string } {
  const site = req.headers["sec-fetch-site"];
  if (typeof site === "string" && site !== "same-origin" && site !== "none") return { ok: false, why: `Sec-Fetch-Site is '${site}'` };
  const origin = req.headers.origin;
  if (origin !== undefined) {
    // HTTP/2 (a browser over TLS) names the host in :authority.
    const authority = req.headers[":authority"];
    const host = req.headers.host ?? (typeof authority === "string" ? authority : undefined);
    let originHost: string;
    try {
      originHost = new URL(origin).host;
    } catch {
      return { ok: false, why: `Origin '${origin}' is not a URL` };
    }
    if (!host || originHost !== host) return { ok: false, why: `Origin '${origin}' is not this server (${host ?? "no Host"})` };
  }
  return { ok: true };
}

/** Methods that change nothing: they need the session cookie, not the CSRF token. */
export function isSafeMethod(method: string | undefined): boolean {
  return method === "GET" || method === "HEAD";
}
