import type { IncomingMessage } from "node:http";
import type { ApiKeyInfo, Store } from "../../store/store.js";
import { Fields, readJsonObject } from "../rest/body.js";

/** Where the page manages API keys: GET and POST /dashboard/api/keys, DELETE /dashboard/api/keys/<id>. */
export const KEYS_PATH = "/dashboard/api/keys";

/** What a keys call answers: a status and a JSON body, and what the audit entry says. */
export interface KeysAnswer {
  status: number;
  body: unknown;
  /** The key the call created or revoked (its id: the key itself is never logged). */
  target?: string;
}

const fail = (status: number, error: string, message: string): KeysAnswer => ({ status, body: { error, message, status } });

const toJson = (k: ApiKeyInfo) => ({
  id: k.id,
  name: k.name,
  mask: k.mask,
  created_at: new Date(k.createdAt).toISOString(),
  last_used_at: k.lastUsedAt === undefined ? null : new Date(k.lastUsedAt).toISOString(),
});

/**
 * The server's API keys, as `locale2b keys list|create|revoke` manages them,
 * for a signed-in page: list (masked), create (the key is in this one answer
 * and nowhere else), revoke by id. The session's own key cannot be revoked
 * here (409): sign in with another key first, or use the CLI. `sub` is the
 * path below KEYS_PATH ("" or "/<id>").
 */
export async function keysCall(store: Store, req: IncomingMessage, sub: string, sessionKeyId: string): Promise<KeysAnswer> {
  const method = req.method ?? "GET";
  if (sub === "" || sub === "/") {
    if (method === "GET" || method === "HEAD") {
      const keys = await store.listApiKeys();
      return { status: 200, body: keys.sort((a, b) => a.createdAt - b.createdAt).map(toJson) };
    }
    if (method === "POST") {
      let name: string;
      try {
        name = new Fields(await readJsonObject(req)).string("name")?.trim() ?? "";
      } catch (err) {
        return fail(400, "invalid_request", (err as Error).message);
      }
      if (!name) return fail(400, "invalid_request", "field 'name' is required: a name that says who or what will use the key (1-100 characters)");
      if (name.length > 100 || /[\u0000-\u001f\u007f]/.test(name)) return fail(400, "invalid_request", "field 'name' must be 1-100 characters with no control characters");
      const { key, info } = await store.createApiKey(name);
      return { status: 201, body: { ...toJson(info), key }, target: info.id };
    }
    return fail(405, "method_not_allowed", `use GET or POST on ${KEYS_PATH}`);
  }
  const m = /^\/(key_[0-9a-f]{1,64})$/.exec(sub);
  if (!m) return fail(404, "not_found", `no such key route ${KEYS_PATH}${sub}: revoke a key with DELETE ${KEYS_PATH}/<id> (an id as GET ${KEYS_PATH} lists it, key_…)`);
  const id = m[1]!;
  if (method !== "DELETE") return fail(405, "method_not_allowed", `use DELETE on ${KEYS_PATH}/<id>`);
  if (id === sessionKeyId) {
    return fail(409, "conflict", `${id} is the key this session signed in with: sign in with another key to revoke it, or run 'locale2b keys revoke ${id}'`);
  }
  if (!(await store.revokeApiKey(id))) return fail(404, "not_found", `no API key ${id}: it may have been revoked already (GET ${KEYS_PATH} lists the keys)`);
  return { status: 200, body: { revoked: id }, target: id };
}
