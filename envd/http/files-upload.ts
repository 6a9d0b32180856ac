import busboy from "busboy";
import type { IncomingMessage } from "node:http";
import { basename } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import type { EnvdContext } from "../context.js";
import type { User } from "../users.js";
import { detachBody, RequestAbortedError, requestDecoding } from "./body.js";
import { errnoCode, HttpError, lookupRequestUser, resolveRequestPath, type RouteHandler } from "./common.js";
import { sendJson } from "./json.js";
import { metadataFromHeaders } from "./metadata.js";
import { authorizeFiles } from "./signature.js";
import { StagedFile } from "./staged-file.js";

/** The largest `file` part without a filename (busboy holds those in memory). */
const FIELD_FILE_LIMIT = 16 * 1024 * 1024;

interface UploadedEntry {
  path: string;
  name: string;
  type: "file";
  metadata?: Record<string, string>;
}

/**
 * POST /files: raw (application/octet-stream, needs `path`) or multipart
 * uploads, optionally gzipped, streamed to temporary files and committed
 * only once the whole body arrived. Answers the written files as EntryInfo.
 */
export const handleUpload: RouteHandler = async (ctx, req, res, query) => {
  authorizeFiles(ctx, req, query, "write");
  const user = lookupRequestUser(ctx, query.get("username"));
  const metadata = metadataFromHeaders(req);
  const decoding = requestDecoding(req.headers["content-encoding"]);
  const rawPath = query.get("path") || undefined;
  const fixedDest = rawPath === undefined ? undefined : resolveRequestPath(ctx, rawPath, user);
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();

  const staged: StagedFile[] = [];
  // A plain octet-stream body goes from the socket to the file with nothing in between (file-receiver.ts).
  const raw = type === "application/octet-stream" && decoding === undefined;
  const body = raw ? undefined : detachBody(req);
  try {
    if (type === "application/octet-stream") {
      if (!fixedDest) throw new HttpError(400, "the 'path' query parameter is required for application/octet-stream uploads");
      const file = await StagedFile.create(fixedDest, user, ctx.users);
      staged.push(file);
      if (body) await file.write(decode(body.stream, decoding));
      else await file.receive(req, res);
    } else if (body && type === "multipart/form-data") {
      await receiveMultipart(ctx, req, decode(body.stream, decoding), fixedDest, user, staged);
    } else {
      throw new HttpError(400, `unsupported Content-Type '${type || "(none)"}': use multipart/form-data or application/octet-stream`);
    }
    for (const file of staged) await file.commit(metadata);
  } catch (err) {
    if (body) body.release();
    else if (!req.complete && !req.destroyed) req.resume(); // drop the rest, so the error answer can be sent
    await Promise.all(staged.map((f) => f.discard()));
    throw uploadError(err);
  }

  const entries: UploadedEntry[] = staged.map((f) => ({
    path: f.path,
    name: basename(f.path),
    type: "file",
    ...(Object.keys(metadata).length > 0 ? { metadata } : {}),
  }));
  sendJson(res, 200, entries);
};

/** `source` gunzipped when asked; errors on either side surface on the result. */
function decode(source: Readable, decoding: "gzip" | undefined): Readable {
  if (decoding !== "gzip") return source;
  const gunzip = createGunzip();
  source.on("error", (err) => gunzip.destroy(err));
  gunzip.on("close", () => source.destroy());
  return source.pipe(gunzip);
}

/**
 * Parses a multipart body: each part named `file` goes to `fixedDest` or to
 * its filename taken as a path. Resolves once every part is on disk (in its
 * temporary file); rejects on a malformed or truncated form or any write error.
 */
async function receiveMultipart(
  ctx: EnvdContext,
  req: IncomingMessage,
  source: Readable,
  fixedDest: string | undefined,
  user: User,
  staged: StagedFile[],
): Promise<void> {
  let parser: busboy.Busboy;
  try {
    parser = busboy({ headers: req.headers, preservePath: true, defParamCharset: "utf8", limits: { fieldSize: FIELD_FILE_LIMIT } });
  } catch (err) {
    throw new HttpError(400, `error parsing multipart form: ${(err as Error).message}`);
  }
  const writes: Promise<void>[] = [];
  const seen = new Set<string>();
  let failure: unknown;
  const fail = (err: unknown) => {
    failure ??= err;
    parser.destroy(err instanceof Error ? err : new Error(String(err)));
  };

  /** Starts writing one part named `file` to its destination; `filename` undefined for a part without one. */
  const receive = (stream: Readable, filename: string | undefined) => {
    let dest: string;
    try {
      dest = fixedDest ?? destinationFromFilename(ctx, filename, user);
      if (seen.has(dest)) throw new HttpError(400, `path '${dest}' is given for more than one file part`);
    } catch (err) {
      stream.resume();
      fail(err);
      return;
    }
    seen.add(dest);
    writes.push(
      (async () => {
        const file = await StagedFile.create(dest, user, ctx.users);
        staged.push(file);
        try {
          await file.write(stream);
        } catch (err) {
          // The part itself failed (malformed or aborted form): the parser reports that.
          if (file.sourceFailed) return;
          throw err;
        }
      })().catch((err: unknown) => {
        stream.resume();
        fail(err);
      }),
    );
  };

  parser.on("file", (name, stream, info) => {
    // busboy destroys the part in flight with the parser's error; that error is handled via the parser.
    stream.on("error", () => undefined);
    if (name !== "file" || failure !== undefined) {
      stream.resume();
      return;
    }
    receive(stream, info.filename);
  });

  // `form.append("file", "text")`, as E2B's SDK tests post to uploadUrl(): a part without a filename
  // is a "field" to busboy, held in memory and decoded as text (FormData sends strings as UTF-8;
  // binary content comes as a Blob, which has a filename).
  parser.on("field", (name, value, info) => {
    if (name !== "file" || failure !== undefined) return;
    if (info.valueTruncated) {
      fail(
        new HttpError(
          413,
          `a 'file' part without a filename is held in memory and may be at most ${FIELD_FILE_LIMIT} bytes: give the part a filename (or upload as application/octet-stream) to stream it`,
        ),
      );
      return;
    }
    receive(Readable.from([Buffer.from(value, "utf8")]), undefined);
  });

  try {
    await pipeline(source, parser);
  } catch (err) {
    await Promise.allSettled(writes);
    if (failure !== undefined) throw failure;
    if (err instanceof RequestAbortedError || errnoCode(err)?.startsWith("Z_")) throw err;
    throw new HttpError(400, `error parsing multipart form: ${(err as Error).message}`);
  }
  await Promise.allSettled(writes);
  if (failure !== undefined) throw failure;
  if (staged.length === 0) throw new HttpError(400, "the multipart form has no file part named 'file'");
  // Answer in the order the parts came, whatever order their writes finished in.
  const order = [...seen];
  staged.sort((a, b) => order.indexOf(a.path) - order.indexOf(b.path));
}

function destinationFromFilename(ctx: EnvdContext, filename: string | undefined, user: User): string {
  if (!filename) {
    throw new HttpError(
      400,
      "a 'file' part has no filename and no 'path' query parameter was given: add ?path=<destination> (uploadUrl(path) does) or give the part a filename",
    );
  }
  return resolveRequestPath(ctx, filename, user);
}

/** Maps write failures to envd's statuses: 507 on a full disk, 400 on bad gzip, 500 otherwise. */
function uploadError(err: unknown): unknown {
  if (err instanceof HttpError || err instanceof RequestAbortedError) return err;
  const code = errnoCode(err);
  const message = err instanceof Error ? err.message : String(err);
  if (code === "ENOSPC" || code === "EDQUOT") return new HttpError(507, "not enough disk space available");
  if (code === "EACCES" || code === "EPERM") return new HttpError(403, `permission denied: ${message}`);
  if (code === "EROFS") return new HttpError(403, `the filesystem is read-only: ${message}`);
  if (code?.startsWith("Z_")) return new HttpError(400, `error decompressing the gzip request body: ${message}`);
  if (code === "EISDIR") return new HttpError(400, message);
  return new HttpError(500, `error writing the uploaded file: ${message}`);
}
