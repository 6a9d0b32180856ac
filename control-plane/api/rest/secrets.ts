// E2B's /secrets: create, list (paged by X-Next-Token), get, update (a new
// version) and delete (the SDKs' Secret.create/list/getInfo/update/destroy).
// No answer carries a value; the audit entry of each request names the
// secret and its version.
import { TEAM, type SecretRecord } from "../../domain/secret.js";
import type { SecretService } from "../../secrets/secret-service.js";
import { parseLimit, readJsonObject } from "./body.js";
import { HttpError, sendJson, sendNoContent } from "./errors.js";
import type { ApiDeps } from "../deps.js";
import type { RestContext, Route } from "./router.js";

/** What a secrets route needs: the exchange and the secrets (a fleet's API replica has nothing else). */
export type SecretContext = Pick<RestContext, "req" | "res" | "params" | "query" | "note"> & { deps: Pick<ApiDeps, "secrets"> };
export type SecretHandler = (ctx: SecretContext) => Promise<void>;

function secretsOf(ctx: SecretContext): SecretService {
  if (!ctx.deps.secrets) throw new HttpError(404, "secrets are not served by this server");
  return ctx.deps.secrets;
}

/** E2B's Secret: metadata only. */
export function toSecret(s: SecretRecord): Record<string, unknown> {
  return {
    secretID: s.id,
    name: s.name,
    currentVersion: s.currentVersion,
    metadata: s.metadata,
    createdAt: new Date(s.createdAt).toISOString(),
    updatedAt: new Date(s.updatedAt).toISOString(),
  };
}

function noteSecret(ctx: SecretContext, s: SecretRecord): void {
  if (ctx.note) ctx.note.details = { secret_id: s.id, name: s.name, version: s.currentVersion };
}

/** Opaque page cursor: the last name handed out. */
function decodeToken(token: string): string {
  const name = Buffer.from(token, "base64url").toString("utf8");
  if (!/^[a-z0-9_-]{1,128}$/.test(name)) throw new HttpError(400, `invalid nextToken '${token}': pass the X-Next-Token of the page before`);
  return name;
}

async function create(ctx: SecretContext): Promise<void> {
  const body = await readJsonObject(ctx.req, undefined, { secret: true });
  const s = await secretsOf(ctx).create(TEAM, body.name, body.value, body.metadata);
  noteSecret(ctx, s);
  sendJson(ctx.res, 201, toSecret(s));
}

async function list(ctx: SecretContext): Promise<void> {
  const limit = parseLimit(ctx.query.get("limit"));
  const token = ctx.query.get("nextToken");
  const page = await secretsOf(ctx).list(TEAM, limit + 1, token ? decodeToken(token) : undefined);
  const items = page.slice(0, limit);
  const next: Record<string, string> = page.length > limit ? { "x-next-token": Buffer.from(items[items.length - 1]!.name).toString("base64url") } : {};
  sendJson(ctx.res, 200, items.map(toSecret), next);
}

async function get(ctx: SecretContext): Promise<void> {
  sendJson(ctx.res, 200, toSecret(await secretsOf(ctx).get(TEAM, ctx.params.secretID!)));
}

async function update(ctx: SecretContext): Promise<void> {
  const body = await readJsonObject(ctx.req, undefined, { secret: true });
  const s = await secretsOf(ctx).update(TEAM, ctx.params.secretID!, body.value, body.metadata);
  noteSecret(ctx, s);
  sendJson(ctx.res, 200, toSecret(s));
}

async function destroy(ctx: SecretContext): Promise<void> {
  noteSecret(ctx, await secretsOf(ctx).delete(TEAM, ctx.params.secretID!));
  sendNoContent(ctx.res);
}

export const secretRoutes: Route<SecretHandler>[] = [
  { method: "POST", path: "/secrets", handler: create },
  { method: "GET", path: "/secrets", handler: list },
  { method: "GET", path: "/secrets/:secretID", handler: get },
  { method: "POST", path: "/secrets/:secretID", handler: update },
  { method: "DELETE", path: "/secrets/:secretID", handler: destroy },
];
