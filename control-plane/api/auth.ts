import type { IncomingHttpHeaders } from "node:http";
import type { ApiKeyInfo, Store } from "../store/store.js";

/**
 * The caller's API key: `X-API-KEY` (what the E2B SDKs send; any case) or
 * `Authorization: Bearer <key>`. Undefined when missing or not valid.
 */
export async function apiKeyFromHeaders(store: Store, headers: IncomingHttpHeaders | Headers): Promise<ApiKeyInfo | undefined> {
  const get = (name: string): string | undefined => {
    if (headers instanceof Headers) return headers.get(name) ?? undefined;
    const v = headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  let key = get("x-api-key");
  if (!key) {
    const auth = get("authorization");
    const m = auth ? /^Bearer\s+(\S+)$/i.exec(auth) : null;
    key = m?.[1];
  }
  return key ? store.verifyApiKey(key.trim()) : undefined;
}

export const MISSING_KEY_MESSAGE =
  "missing or invalid API key: send it as the X-API-KEY header (E2B_API_KEY for the E2B SDKs); create one with 'locale2b keys create'";
