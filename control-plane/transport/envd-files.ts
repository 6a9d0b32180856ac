import http from "node:http";
import { ENVD_PORT } from "../../envd/version.js";
import type { EnvdTarget } from "./envd-rpc.js";

/**
 * A streamed request to a sandbox's envd `/files` endpoint (download with
 * GET, upload with POST and an application/octet-stream body) over the
 * sandbox's pooled vsock connections. The caller pipes the body in or the
 * response out, so the bytes flow with back-pressure and are never held
 * whole.
 */
export function envdFilesRequest(
  target: EnvdTarget,
  o: { method: "GET" | "POST"; path: string; username: string; headers?: http.OutgoingHttpHeaders },
): http.ClientRequest {
  const query = new URLSearchParams({ path: o.path, username: o.username });
  return http.request({
    agent: target.endpoint.agent(),
    method: o.method,
    path: `/files?${query}`,
    headers: {
      host: `${ENVD_PORT}-${target.endpoint.sandboxId}`,
      "x-access-token": target.token,
      ...(o.method === "POST" ? { "content-type": "application/octet-stream" } : {}),
      ...o.headers,
    },
  });
}

/** Reads a small response body (an envd error) as text, up to `limit` bytes. */
export function readSmall(res: http.IncomingMessage, limit = 64 * 1024): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on("data", (c: Buffer) => {
      if (size < limit) chunks.push(c);
      size += c.length;
    });
    res.on("end", () => resolve(Buffer.concat(chunks).toString("utf8").slice(0, limit)));
    res.on("error", () => resolve(Buffer.concat(chunks).toString("utf8")));
  });
}

/** envd's error body `{"code":…,"message":"…"}` → its message (else the raw text). */
export function envdErrorMessage(text: string): string {
  try {
    const j = JSON.parse(text) as { message?: unknown };
    if (typeof j.message === "string") return j.message;
  } catch {
    // not JSON
  }
  return text.trim() || "(no message)";
}
