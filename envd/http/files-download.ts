import type { FileHandle } from "node:fs/promises";
import { open, stat } from "node:fs/promises";
import type { OutgoingHttpHeaders } from "node:http";
import { basename } from "node:path";
import { pipeline } from "node:stream/promises";
import { createGzip } from "node:zlib";
import { sendError } from "./json.js";
import { checkFileAccess, errnoCode, HttpError, lookupRequestUser, resolveRequestPath, type RouteHandler } from "./common.js";
import {
  contentDisposition,
  contentTypeFor,
  ifRangeHolds,
  negotiateEncoding,
  notModifiedSince,
  parseRange,
} from "./download-headers.js";
import { sendFileRange } from "./file-sender.js";
import { sendFileZeroCopy } from "./file-sendfile.js";
import { authorizeFiles } from "./signature.js";

/** gzip level for downloads: fast, as the bytes are usually headed over a network. */
const GZIP_LEVEL = 1;

/**
 * GET/HEAD /files: streams one regular file from disk, gzipped when the
 * client accepts it, otherwise identity with Range and If-Modified-Since.
 */
export const handleDownload: RouteHandler = async (ctx, req, res, query) => {
  authorizeFiles(ctx, req, query, "read");
  const user = lookupRequestUser(ctx, query.get("username"));
  const path = resolveRequestPath(ctx, query.get("path") ?? "", user);
  checkFileAccess(ctx, user, path, "read");

  let info;
  try {
    info = await stat(path);
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ENOENT" || code === "ENOTDIR") throw new HttpError(404, `path '${path}' does not exist`);
    if (code === "EACCES" || code === "EPERM") throw new HttpError(403, `permission denied: cannot read '${path}'`);
    throw new HttpError(500, `error checking if path exists '${path}': ${(err as Error).message}`);
  }
  if (info.isDirectory()) throw new HttpError(400, `path '${path}' is a directory`);
  if (!info.isFile()) throw new HttpError(400, `path '${path}' is not a regular file`);

  const rangeHeader = req.headers.range;
  const encoding = negotiateEncoding(req.headers["accept-encoding"], rangeHeader !== undefined);
  if (!encoding) throw new HttpError(406, "no acceptable encoding found, supported: [identity, gzip]");

  let handle: FileHandle;
  try {
    handle = await open(path, "r");
  } catch (err) {
    if (errnoCode(err) === "ENOENT") throw new HttpError(404, `path '${path}' does not exist`);
    if (errnoCode(err) === "EACCES" || errnoCode(err) === "EPERM") throw new HttpError(403, `permission denied: cannot read '${path}'`);
    throw new HttpError(500, `error opening file '${path}': ${(err as Error).message}`);
  }

  let streaming = false;
  try {
    const current = await handle.stat();
    const size = current.size;
    const lastModified = current.mtime.toUTCString();
    const headers: OutgoingHttpHeaders = {
      "Content-Disposition": contentDisposition(basename(path)),
      Vary: "Accept-Encoding",
      "Last-Modified": lastModified,
    };

    if (notModifiedSince(req.headers, current.mtimeMs)) {
      res.writeHead(304, headers).end();
      return;
    }
    headers["Content-Type"] = contentTypeFor(path);
    const head = req.method === "HEAD";

    if (encoding === "gzip") {
      headers["Content-Encoding"] = "gzip";
      res.writeHead(200, headers);
      if (head) {
        res.end();
        return;
      }
      streaming = true;
      await gzipped(handle, res);
      return;
    }

    headers["Accept-Ranges"] = "bytes";
    const ifRange = req.headers["if-range"];
    const range = ifRangeHolds(typeof ifRange === "string" ? ifRange : undefined, lastModified) ? parseRange(rangeHeader, size) : undefined;
    if (range === "unsatisfiable") {
      res.setHeader("Content-Range", `bytes */${size}`);
      sendError(res, 416, `range '${rangeHeader}' is not satisfiable for a file of ${size} bytes`);
      return;
    }
    if (range) {
      headers["Content-Range"] = `bytes ${range.start}-${range.end}/${size}`;
      headers["Content-Length"] = range.end - range.start + 1;
      res.writeHead(206, headers);
    } else {
      headers["Content-Length"] = size;
      res.writeHead(200, headers);
    }
    if (head || size === 0) {
      res.end();
      return;
    }
    streaming = true;
    const { start, end } = range ?? { start: 0, end: size - 1 };
    try {
      if (!(await sendFileZeroCopy(handle.fd, start, end, res))) await sendFileRange(handle.fd, start, end, res);
    } catch {
      // Client went away or the read failed after the headers: the response is cut short (sendFileRange destroyed it).
    } finally {
      await handle.close().catch(() => undefined);
    }
  } finally {
    if (!streaming) await handle.close().catch(() => undefined);
  }
};

/** Streams the open file gzipped to the response with back-pressure; the stream closes the handle. */
async function gzipped(handle: FileHandle, res: NodeJS.WritableStream & { destroy(err?: Error): void }): Promise<void> {
  const source = handle.createReadStream({ autoClose: true, highWaterMark: 256 * 1024 });
  try {
    await pipeline(source, createGzip({ level: GZIP_LEVEL, chunkSize: 256 * 1024 }), res);
  } catch {
    // Client went away or the read failed after the headers: the response is cut short.
    res.destroy();
  }
}
