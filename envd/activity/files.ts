import { stat } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { EnvdContext } from "../context.js";
import { resolvePath } from "../paths.js";

function requestUserName(ctx: EnvdContext, query: URLSearchParams): string {
  return query.get("username") || ctx.state.defaultUser;
}

async function size(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch {
    return 0;
  }
}

/**
 * Reports a successful `GET /files` as file.read and `POST /files` as
 * file.written, once the response is complete, without touching the body
 * stream: the download's path comes from the query (resolved as /files
 * resolves it), an upload's paths from envd's own JSON answer (a multipart
 * upload may write several files), and sizes from the files themselves.
 */
export function observeFileTransfer(ctx: EnvdContext, req: IncomingMessage, res: ServerResponse, query: URLSearchParams): void {
  const method = req.method;
  if (method === "GET") {
    res.once("finish", () => {
      if (res.statusCode !== 200) return;
      const userName = requestUserName(ctx, query);
      const user = ctx.users.lookup(userName);
      if (!user) return;
      let path: string;
      try {
        path = resolvePath(query.get("path") ?? "", user, ctx.state.defaultWorkdir);
      } catch {
        return;
      }
      void size(path).then((bytes) => ctx.activity.emit({ case: "fileRead", value: { path, bytes: BigInt(bytes), user: userName } }));
    });
    return;
  }
  if (method !== "POST") return;
  // The answer is a small JSON array of the written entries: keep what end() is given.
  let answer: Buffer | string | undefined;
  const end = res.end.bind(res) as (...args: unknown[]) => ServerResponse;
  res.end = ((...args: unknown[]) => {
    if (res.statusCode === 200 && (Buffer.isBuffer(args[0]) || typeof args[0] === "string")) answer = args[0] as Buffer | string;
    return end(...args);
  }) as ServerResponse["end"];
  res.once("finish", () => {
    if (res.statusCode !== 200 || answer === undefined) return;
    let entries: { path?: unknown }[];
    try {
      entries = JSON.parse(answer.toString()) as { path?: unknown }[];
    } catch {
      return;
    }
    if (!Array.isArray(entries)) return;
    const userName = requestUserName(ctx, query);
    for (const entry of entries) {
      if (typeof entry?.path !== "string") continue;
      const path = entry.path;
      void size(path).then((bytes) => ctx.activity.emit({ case: "fileWritten", value: { path, bytes: BigInt(bytes), user: userName } }));
    }
  });
}
