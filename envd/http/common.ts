import { ConnectError } from "@connectrpc/connect";
import type { IncomingMessage, ServerResponse } from "node:http";
import { hasValidAccessToken, UNAUTHORIZED_MESSAGE } from "../auth/access-token.js";
import type { EnvdContext } from "../context.js";
import { resolvePath } from "../paths.js";
import { AccessDenied, FsAccess, type Want } from "../auth/fs-access.js";
import type { User } from "../users.js";

/** One plain-HTTP endpoint; `query` is the parsed query string. */
export type RouteHandler = (
  ctx: EnvdContext,
  req: IncomingMessage,
  res: ServerResponse,
  query: URLSearchParams,
) => Promise<void>;

/** An error answered as envd's `{code, message}` JSON body with `status`. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "HttpError";
  }
}

/** The request's query string (everything after the first `?`). */
export function queryOf(req: IncomingMessage): URLSearchParams {
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  return new URLSearchParams(q >= 0 ? url.slice(q + 1) : "");
}

/** Routes other than /health, /files and /init need the access token once one is set. */
export function requireAccessToken(ctx: EnvdContext, req: IncomingMessage): void {
  if (!hasValidAccessToken(ctx.state.accessToken, req.headers)) {
    throw new HttpError(401, UNAUTHORIZED_MESSAGE);
  }
}

/** The `username` query parameter's user, or envd's default user when absent; unknown → 401. */
export function lookupRequestUser(ctx: EnvdContext, username: string | null): User {
  const name = username || ctx.state.defaultUser;
  const user = ctx.users.lookup(name);
  if (!user) throw new HttpError(401, `error looking up user '${name}': user: unknown user ${name}`);
  return user;
}

/** resolvePath with its errors turned into 400s. */
export function resolveRequestPath(ctx: EnvdContext, input: string, user: User): string {
  try {
    return resolvePath(input, user, ctx.state.defaultWorkdir);
  } catch (err) {
    throw new HttpError(400, err instanceof ConnectError ? err.rawMessage : String(err));
  }
}

/** The errno-style code of a Node error, if any. */
export function errnoCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** True when the process runs as root and so must chown what it creates for a user. */
export function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** The files API acts as the requesting user: 403 when they may not `want` `path`. */
export function checkFileAccess(ctx: EnvdContext, user: User, path: string, want: Want): void {
  try {
    new FsAccess(ctx.users).check(user, path, want);
  } catch (err) {
    if (err instanceof AccessDenied) throw new HttpError(403, err.message);
    throw err;
  }
}
