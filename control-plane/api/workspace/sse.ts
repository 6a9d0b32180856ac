import type { ServerResponse } from "node:http";

/** Seconds between keep-alive comments on an idle stream (proxies close silent connections). */
const HEARTBEAT_MS = 15_000;

/**
 * Server-sent events on one response, with back-pressure: send() resolves
 * once the event was handed to the socket, waiting for it to drain when
 * its buffer is full, so a slow reader makes its writer wait rather than
 * making the server buffer.
 */
export class SseWriter {
  private done = false;
  private readonly heartbeat: NodeJS.Timeout;
  private waiting = false;

  constructor(
    private readonly res: ServerResponse,
    signal: AbortSignal,
  ) {
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-store",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    res.flushHeaders();
    const close = () => this.finish();
    res.once("close", close);
    signal.addEventListener("abort", close, { once: true });
    this.heartbeat = setInterval(() => {
      if (!this.done && !this.waiting) res.write(": keep-alive\n\n");
    }, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  get closed(): boolean {
    return this.done || this.res.destroyed;
  }

  private finish(): void {
    this.done = true;
    clearInterval(this.heartbeat);
  }

  /** One event; false once the client is gone. */
  async send(event: string, data: unknown, id?: number): Promise<boolean> {
    if (this.closed) return false;
    const text = `${id !== undefined ? `id: ${id}\n` : ""}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    if (this.res.write(text)) return true;
    this.waiting = true;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.res.off("drain", done);
        this.res.off("close", done);
        resolve();
      };
      this.res.once("drain", done);
      this.res.once("close", done);
    });
    this.waiting = false;
    return !this.closed;
  }

  comment(text: string): void {
    if (!this.closed) this.res.write(`: ${text}\n\n`);
  }

  end(): void {
    this.finish();
    if (!this.res.destroyed && !this.res.writableEnded) this.res.end();
  }

  /** Drops the connection (a subscriber that fell too far behind). */
  destroy(): void {
    this.finish();
    this.res.destroy();
  }
}
