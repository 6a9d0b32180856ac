// The volume file API the SDKs' Volume instances call (`E2B_VOLUME_API_URL`,
// here the server's own port): /volumecontent/<volumeID>/{dir,path,file},
// authenticated by the volume's own token (`Authorization: Bearer <token>`),
// not by an API key. Paths are resolved inside the volume only
// (volumes/volume-fs.ts).
import type { EntryAttrs } from "../../volumes/volume-fs.js";
import { VolumeFullError } from "../../volumes/volume-paths.js";
import { readJsonObject } from "./body.js";
import { HttpError, sendJson, sendNoContent } from "./errors.js";
import type { RestContext, Route } from "./router.js";
import { volumesOf } from "./volumes.js";

function queryInt(q: URLSearchParams, name: string): number | undefined {
  const raw = q.get(name);
  if (raw === null || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new HttpError(400, `query parameter '${name}' must be a non-negative integer, got '${raw}'`);
  return n;
}

function queryBool(q: URLSearchParams, name: string): boolean {
  const raw = q.get(name);
  if (raw === null || raw === "" || raw === "false") return false;
  if (raw === "true") return true;
  throw new HttpError(400, `query parameter '${name}' must be true or false, got '${raw}'`);
}

function attrsFrom(q: URLSearchParams): EntryAttrs {
  const uid = queryInt(q, "uid");
  const gid = queryInt(q, "gid");
  const mode = queryInt(q, "mode");
  return { ...(uid !== undefined ? { uid } : {}), ...(gid !== undefined ? { gid } : {}), ...(mode !== undefined ? { mode } : {}) };
}

/** The route's volume, opened with the request's bearer token; a full volume answers 507. */
function withVolume(fn: (ctx: RestContext, fs: Awaited<ReturnType<ReturnType<typeof volumesOf>["authorize"]>>["fs"]) => Promise<void>) {
  return async (ctx: RestContext): Promise<void> => {
    const { fs } = await volumesOf(ctx).authorize(ctx.params.volumeID!, ctx.req.headers.authorization);
    try {
      await fn(ctx, fs);
    } catch (err) {
      if (err instanceof VolumeFullError) throw new HttpError(507, err.message);
      throw err;
    }
  };
}

const listDir = withVolume(async ({ res, query }, fs) => {
  const depth = queryInt(query, "depth") ?? 1;
  sendJson(res, 200, await fs.list(query.get("path") ?? "/", depth));
});

const makeDir = withVolume(async ({ res, query }, fs) => {
  sendJson(res, 201, await fs.makeDir(query.get("path"), attrsFrom(query), queryBool(query, "force")));
});

const getInfo = withVolume(async ({ res, query }, fs) => {
  sendJson(res, 200, await fs.stat(query.get("path")));
});

const updateMetadata = withVolume(async ({ req, res, query }, fs) => {
  const body = await readJsonObject(req);
  const attrs: EntryAttrs = {};
  for (const k of ["uid", "gid", "mode"] as const) {
    const v = body[k];
    if (v === undefined || v === null) continue;
    if (typeof v !== "number" || !Number.isInteger(v)) throw new HttpError(400, `field '${k}' must be an integer, got ${JSON.stringify(v)}`);
    attrs[k] = v;
  }
  sendJson(res, 200, await fs.setAttrs(query.get("path"), attrs));
});

const remove = withVolume(async ({ res, query }, fs) => {
  await fs.remove(query.get("path"));
  sendNoContent(res);
});

const readFile = withVolume(async ({ req, res, query }, fs) => {
  const { size, stream } = await fs.read(query.get("path"));
  res.writeHead(200, { "content-type": "application/octet-stream", "content-length": String(size) });
  if (req.method === "HEAD") {
    stream.destroy();
    res.end();
    return;
  }
  await new Promise<void>((resolve) => {
    stream.on("error", () => res.destroy());
    res.on("close", () => {
      stream.destroy();
      resolve();
    });
    stream.pipe(res);
  });
});

const writeFile = withVolume(async ({ req, res, query }, fs) => {
  queryBool(query, "force"); // always overwrites, as the SDKs' writeFile says; accepted for E2B's clients
  sendJson(res, 201, await fs.write(query.get("path"), req, attrsFrom(query)));
});

export const volumeContentRoutes: Route[] = [
  { method: "GET", path: "/volumecontent/:volumeID/dir", handler: listDir, signed: true },
  { method: "POST", path: "/volumecontent/:volumeID/dir", handler: makeDir, signed: true },
  { method: "GET", path: "/volumecontent/:volumeID/path", handler: getInfo, signed: true },
  { method: "PATCH", path: "/volumecontent/:volumeID/path", handler: updateMetadata, signed: true },
  { method: "DELETE", path: "/volumecontent/:volumeID/path", handler: remove, signed: true },
  { method: "GET", path: "/volumecontent/:volumeID/file", handler: readFile, signed: true },
  { method: "PUT", path: "/volumecontent/:volumeID/file", handler: writeFile, signed: true },
];

