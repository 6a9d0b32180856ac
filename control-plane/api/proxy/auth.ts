import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { safeEqual } from "../../../envd/auth/access-token.js";
import { fileSignature } from "../../../envd/http/signature.js";
import type { SandboxRecord, SandboxState } from "../../domain/sandbox.js";

/** The sandboxes a signed /files URL may belong to: those with an envd to answer it. */
export const SIGNED_URL_STATES: SandboxState[] = ["running", "resuming", "pausing", "paused"];

/**
 * The proxy's own token check: X-Access-Token must be the sandbox's envd
 * token. `/health` needs none and signed `/files` URLs are checked by envd
 * (signature, expiry), as in E2B's envd.
 */
export function accessTokenOk(req: IncomingMessage, token: string): boolean {
  const url = req.url ?? "";
  if (url === "/health" || url.startsWith("/health?")) return true;
  if (url.startsWith("/files?") && url.includes("signature=")) return true;
  const given = req.headers["x-access-token"];
  if (typeof given !== "string" || given.length !== token.length) return false;
  return timingSafeEqual(Buffer.from(given), Buffer.from(token));
}

/**
 * The sandbox a header-less signed `/files` URL belongs to: the one whose
 * envd token reproduces its v1 signature
 * (`"v1_" + base64_nopad(sha256("<path>:<read|write>:<username>:<token>[:<expiration>]"))`),
 * compared in constant time. Undefined when none does.
 */
export function sandboxForSignedUrl(candidates: SandboxRecord[], req: IncomingMessage): string | undefined {
  const query = new URL(req.url ?? "/", "http://localhost").searchParams;
  const signature = query.get("signature");
  if (!signature) return undefined;
  const operation = req.method === "POST" ? "write" : "read";
  const path = query.get("path") ?? "";
  const username = query.get("username") ?? "";
  const rawExpiration = query.get("signature_expiration");
  let expiration: number | undefined;
  if (rawExpiration !== null && rawExpiration !== "") {
    if (!/^-?\d+$/.test(rawExpiration)) return undefined;
    expiration = Number(rawExpiration);
  }
  let found: string | undefined;
  for (const rec of candidates) {
    // No early exit: every candidate is compared.
    if (safeEqual(signature, fileSignature(path, operation, username, rec.envdAccessToken, expiration))) found ??= rec.id;
  }
  return found;
}
