import type { IncomingMessage } from "node:http";

/** The session cookie: scoped to the dashboard's paths, never readable by scripts, never sent cross-site. */
export const SESSION_COOKIE = "l2b_dashboard";
export const COOKIE_PATH = "/dashboard";

/** The value of one cookie of the request, or undefined. */
export function readCookie(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/**
 * Whether the browser reached us over TLS: our own TLS front, or a reverse
 * proxy that terminated it and says so (X-Forwarded-Proto). It only decides
 * the cookie's Secure flag.
 */
export function overTls(req: IncomingMessage): boolean {
  if ((req.socket as { encrypted?: boolean }).encrypted) return true;
  const fwd = req.headers["x-forwarded-proto"];
  return typeof fwd === "string" && fwd.split(",")[0]!.trim().toLowerCase() === "https";
}

/** Set-Cookie for a session id (maxAgeSeconds 0 clears it). */
export function sessionCookie(value: string, maxAgeSeconds: number, secure: boolean): string {
  return [
    `${SESSION_COOKIE}=${value}`,
    `Path=${COOKIE_PATH}`,
    `Max-Age=${Math.max(0, Math.floor(maxAgeSeconds))}`,
    "HttpOnly",
    "SameSite=Strict",
    ...(secure ? ["Secure"] : []),
  ].join("; ");
}
