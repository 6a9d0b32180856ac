// Test helpers for the workspace API: a JSON client with the key, and an SSE reader.

export interface WsResponse<T = Record<string, unknown>> {
  status: number;
  body: T;
  headers: Headers;
}

/** A JSON client for the workspace API at `base` (LOCALE2B_BASE_URL) with `key` in X-API-Key. */
export function workspaceClient(base: string, key: string) {
  return async function call<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<WsResponse<T>> {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { "x-api-key": key, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: left as text
    }
    return { status: res.status, body: parsed as T, headers: res.headers };
  };
}

export interface SseEvent {
  id?: string;
  event: string;
  data: Record<string, unknown>;
}

/**
 * Opens a server-sent events stream and reads events from it one by one.
 * `next(pred)` returns the next event that matches (skipping others).
 */
export async function openSse(url: string, headers: Record<string, string>) {
  const abort = new AbortController();
  const res = await fetch(url, { headers: { accept: "text/event-stream", ...headers }, signal: abort.signal });
  if (res.status !== 200) throw new Error(`SSE ${url} answered ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  const queue: SseEvent[] = [];
  const read = async (): Promise<SseEvent | undefined> => {
    for (;;) {
      const sep = buf.indexOf("\n\n");
      if (sep >= 0) {
        const block = buf.slice(0, sep);
        buf = buf.slice(sep + 2);
        const lines = block.split("\n").filter((l) => !l.startsWith(":"));
        if (lines.length === 0) continue;
        const get = (k: string) => lines.find((l) => l.startsWith(`${k}: `))?.slice(k.length + 2);
        return { ...(get("id") ? { id: get("id") } : {}), event: get("event") ?? "message", data: JSON.parse(get("data") ?? "null") };
      }
      const r = await reader.read();
      if (r.done) return undefined;
      buf += decoder.decode(r.value, { stream: true });
    }
  };
  return {
    async next(pred: (e: SseEvent) => boolean = () => true): Promise<SseEvent> {
      for (;;) {
        const e = queue.shift() ?? (await read());
        if (!e) throw new Error("the event stream ended");
        if (pred(e)) return e;
      }
    },
    close() {
      abort.abort();
    },
  };
}
