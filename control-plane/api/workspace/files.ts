import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { Filesystem, FileType } from "../../../gen/ts/filesystem/filesystem_pb.js";
import type { EnvdTarget } from "../../transport/envd-rpc.js";
import { envdErrorMessage, envdFilesRequest, readSmall } from "../../transport/envd-files.js";
import { WORKSPACE_DIR } from "../../workspace/workspace-dir.js";
import { Fields, readJsonObject } from "../rest/body.js";
import type { WsContext } from "./context.js";
import { sendJson, WsError } from "./errors.js";
import { sandboxPath } from "./paths.js";

/** Files are read and written as the sandbox's user (E2B's default user). */
const FILE_USER = "user";

const TYPE_NAMES: Record<number, string> = {
  [FileType.FILE]: "file",
  [FileType.DIRECTORY]: "directory",
  [FileType.SYMLINK]: "symlink",
};

/** envd's answer to a /files request: the response, or a WsError saying what envd said. */
async function envdFiles(ctx: WsContext, target: EnvdTarget, method: "GET" | "POST", path: string, body?: IncomingMessage | Buffer): Promise<IncomingMessage> {
  const up = envdFilesRequest(target, {
    method,
    path,
    username: FILE_USER,
    ...(Buffer.isBuffer(body) ? { headers: { "content-length": String(body.length) } } : body?.headers["content-length"] ? { headers: { "content-length": body.headers["content-length"] } } : {}),
  });
  const answered = new Promise<IncomingMessage>((resolve, reject) => {
    up.once("response", resolve);
    up.once("error", reject);
  });
  const onAbort = () => up.destroy(new Error("the client went away"));
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  try {
    if (Buffer.isBuffer(body)) up.end(body);
    else if (body) await pipeline(body, up);
    else up.end();
    const res = await answered;
    if (res.statusCode !== 200) {
      const message = envdErrorMessage(await readSmall(res));
      const status = res.statusCode ?? 502;
      throw new WsError(status >= 500 && status !== 507 ? 502 : status, status === 404 ? "not_found" : status === 507 ? "no_space" : status >= 500 ? "sandbox_error" : "invalid_request", `${path}: ${message}`);
    }
    return res;
  } catch (err) {
    if (err instanceof WsError) throw err;
    if (ctx.signal.aborted) throw new WsError(499, "client_gone", "the client went away");
    throw new WsError(502, "sandbox_error", `the sandbox did not complete the transfer of ${path}: ${(err as Error).message}`);
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
  }
}

/** True when the bytes are text: valid UTF-8 without NUL bytes. */
function isText(data: Buffer): boolean {
  if (data.includes(0)) return false;
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(data);
    return true;
  } catch {
    return false;
  }
}

/** POST /sandboxes/{id}/files/write {path, content, is_base64?}: creates parent directories; replaces the file. */
export async function writeFile(ctx: WsContext): Promise<void> {
  const f = new Fields(await readJsonObject(ctx.req, ctx.deps.settings.jsonFileBytes * 2 + 64 * 1024));
  const path = sandboxPath(f.requiredString("path"));
  const content = f.string("content");
  if (content === undefined) throw new WsError(400, "invalid_request", "field 'content' is required (\"\" for an empty file)");
  const data = f.bool("is_base64") ? Buffer.from(content, "base64") : Buffer.from(content, "utf8");
  if (data.length > ctx.deps.settings.jsonFileBytes) {
    throw new WsError(413, "too_large", `content is ${data.length} bytes, more than files/write takes (${ctx.deps.settings.jsonFileBytes}): use POST /sandboxes/{id}/files/upload?path=… with the raw bytes`);
  }
  ctx.audit.details = { path, bytes: data.length };
  const { sandbox, target } = await ctx.deps.workspaces.target(ctx.params.id!);
  ctx.deps.claims.claim(sandbox.id, "file.written", path);
  (await envdFiles(ctx, target, "POST", path, data)).resume();
  sendJson(ctx.res, 200, { success: true, path, bytes: data.length });
}

/**
 * GET /sandboxes/{id}/files/read?path=[&encoding=base64]: {path, content,
 * is_base64, encoding, size}. Text comes back as text; anything that is
 * not UTF-8 (or has NUL bytes) as base64 with is_base64: true.
 */
export async function readFile(ctx: WsContext): Promise<void> {
  const path = sandboxPath(ctx.query.get("path"));
  const forceBase64 = ctx.query.get("encoding") === "base64";
  ctx.audit.details = { path };
  const { sandbox, target } = await ctx.deps.workspaces.target(ctx.params.id!);
  ctx.deps.claims.claim(sandbox.id, "file.read", path);
  const res = await envdFiles(ctx, target, "GET", path);
  const limit = ctx.deps.settings.jsonFileBytes;
  const declared = Number(res.headers["content-length"] ?? NaN);
  if (declared > limit) {
    res.destroy();
    throw new WsError(413, "too_large", `${path} is ${declared} bytes, more than files/read returns (${limit}): use GET /sandboxes/{id}/files/download?path=…`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) {
      res.destroy();
      throw new WsError(413, "too_large", `${path} is more than files/read returns (${limit} bytes): use GET /sandboxes/{id}/files/download?path=…`);
    }
    chunks.push(chunk);
  }
  const data = Buffer.concat(chunks, size);
  const text = !forceBase64 && isText(data);
  ctx.audit.details.bytes = size;
  sendJson(ctx.res, 200, {
    path,
    content: text ? data.toString("utf8") : data.toString("base64"),
    is_base64: !text,
    encoding: text ? "utf-8" : "base64",
    size,
  });
}

/** GET /sandboxes/{id}/files/list?path=/workspace[&depth=1]: {path, entries: [{name, path, type, size, ...}]}. */
export async function listFiles(ctx: WsContext): Promise<void> {
  const path = sandboxPath(ctx.query.get("path") || WORKSPACE_DIR);
  const rawDepth = ctx.query.get("depth");
  const depth = rawDepth ? Number(rawDepth) : 1;
  if (!Number.isInteger(depth) || depth < 1 || depth > 10) throw new WsError(400, "invalid_request", `query 'depth' must be an integer from 1 to 10, got '${rawDepth}'`);
  ctx.audit.details = { path, depth };
  const { target } = await ctx.deps.workspaces.target(ctx.params.id!);
  const fs = ctx.deps.rpc.client(Filesystem, target, FILE_USER);
  const stat = await fs.stat({ path });
  if (stat.entry?.type !== FileType.DIRECTORY) throw new WsError(400, "not_a_directory", `${path} is not a directory: read it with files/read`);
  const { entries } = await fs.listDir({ path, depth });
  sendJson(ctx.res, 200, {
    path,
    entries: entries.map((e) => ({
      name: e.name,
      path: e.path,
      type: TYPE_NAMES[e.type] ?? "other",
      is_dir: e.type === FileType.DIRECTORY,
      size: Number(e.size),
      permissions: e.permissions,
      owner: e.owner,
      modified_at: e.modifiedTime ? new Date(Number(e.modifiedTime.seconds) * 1000 + Math.floor(e.modifiedTime.nanos / 1e6)).toISOString() : null,
      ...(e.symlinkTarget !== undefined ? { symlink_target: e.symlinkTarget } : {}),
    })),
  });
}

/** POST /sandboxes/{id}/files/upload?path=: the raw request body, streamed to the file (no size cap). */
export async function uploadFile(ctx: WsContext): Promise<void> {
  const path = sandboxPath(ctx.query.get("path"));
  ctx.audit.details = { path };
  const { sandbox, target } = await ctx.deps.workspaces.target(ctx.params.id!);
  ctx.deps.claims.claim(sandbox.id, "file.written", path);
  let bytes = 0;
  ctx.req.on("data", (c: Buffer) => (bytes += c.length));
  (await envdFiles(ctx, target, "POST", path, ctx.req)).resume();
  ctx.audit.details.bytes = bytes;
  sendJson(ctx.res, 200, { success: true, path, bytes });
}

/** GET /sandboxes/{id}/files/download?path=: the file's bytes, streamed. */
export async function downloadFile(ctx: WsContext): Promise<void> {
  const path = sandboxPath(ctx.query.get("path"));
  ctx.audit.details = { path };
  const { sandbox, target } = await ctx.deps.workspaces.target(ctx.params.id!);
  ctx.deps.claims.claim(sandbox.id, "file.read", path);
  const up = await envdFiles(ctx, target, "GET", path);
  ctx.res.writeHead(200, {
    "content-type": "application/octet-stream",
    ...(up.headers["content-length"] ? { "content-length": up.headers["content-length"] } : {}),
    "content-disposition": `attachment; filename="${posix.basename(path).replace(/["\\\r\n]/g, "_")}"`,
    "cache-control": "no-store",
  });
  let bytes = 0;
  up.on("data", (c: Buffer) => (bytes += c.length));
  await pipeline(up, ctx.res).catch(() => ctx.res.destroy());
  ctx.audit.details.bytes = bytes;
}
