import http from "node:http";
import { request, type ControlPlaneChild } from "../lib/control-plane.js";

/** Helpers for the workspace API in `npm run bench -- workspace`. */

/** A JSON call to the workspace API (<server>/workspace) with the server's key; throws on an unexpected status. */
export async function ws<T = Record<string, unknown>>(cp: ControlPlaneChild, method: string, path: string, body?: unknown, expect = [200, 201]): Promise<T> {
  const res = await request(`${cp.url}/workspace${path}`, method, { "X-API-Key": cp.apiKey }, body);
  if (!expect.includes(res.status)) throw new Error(`${method} /workspace${path} answered ${res.status}: ${res.body.slice(0, 300)}`);
  return JSON.parse(res.body) as T;
}

export interface SseStream {
  /** Events received so far (parsed data), in order. */
  readonly received: number;
  onEvent(listener: (data: Record<string, unknown>, at: number) => void): void;
  /** Stops reading the socket altogether (a stalled consumer). */
  stall(): void;
  /** Resolves when the server closes the stream. */
  readonly closed: Promise<void>;
  close(): void;
}

/**
 * An SSE stream of the workspace API's events (parsed as it comes, the
 * parse costing this process only), or a stalled one.
 */
export function openEvents(cp: ControlPlaneChild, query: string): Promise<SseStream> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${cp.url}/workspace/events/stream?${query}`, { headers: { "X-API-Key": cp.apiKey, accept: "text/event-stream" }, agent: false });
    req.once("error", reject);
    req.once("response", (res) => {
      if (res.statusCode !== 200) return reject(new Error(`events stream answered ${res.statusCode}`));
      let buf = "";
      let received = 0;
      const listeners: ((d: Record<string, unknown>, at: number) => void)[] = [];
      let closedResolve!: () => void;
      const closed = new Promise<void>((r) => (closedResolve = r));
      res.on("close", () => closedResolve());
      res.on("error", () => closedResolve());
      res.setEncoding("utf8");
      let subscribed = false;
      res.on("data", (chunk: string) => {
        buf += chunk;
        let sep: number;
        while ((sep = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, sep);
          buf = buf.slice(sep + 2);
          const data = block.split("\n").find((l) => l.startsWith("data: "));
          if (!data) continue;
          const parsed = JSON.parse(data.slice(6)) as Record<string, unknown>;
          if (!subscribed) {
            subscribed = true;
            resolve(stream);
            continue;
          }
          received++;
          const at = Date.now();
          for (const l of listeners) l(parsed, at);
        }
      });
      const stream: SseStream = {
        get received() {
          return received;
        },
        onEvent: (l) => listeners.push(l),
        stall: () => res.pause(),
        closed,
        close: () => req.destroy(),
      };
    });
  });
}
