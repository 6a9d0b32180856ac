import http from "node:http";
import { ENVD_PORT } from "../../envd/version.js";
import type { Endpoint } from "./endpoint.js";

export interface EnvdResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/**
 * Small control requests from the control plane to a sandbox's envd
 * (/health, /init, /metrics) over the sandbox's pooled vsock connections.
 * Not for user traffic: that goes through the proxy, streamed.
 */
export class EnvdClient {
  request(
    endpoint: Endpoint,
    opts: { method: string; path: string; headers?: Record<string, string>; body?: unknown; timeoutMs?: number },
  ): Promise<EnvdResponse> {
    const sandboxId = endpoint.sandboxId;
    const payload = opts.body === undefined ? undefined : Buffer.from(JSON.stringify(opts.body));
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          agent: endpoint.control(),
          method: opts.method,
          path: opts.path,
          headers: {
            host: `${ENVD_PORT}-${sandboxId}`,
            ...(payload ? { "content-type": "application/json", "content-length": String(payload.length) } : {}),
            ...opts.headers,
          },
          timeout: opts.timeoutMs ?? 10_000,
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
          res.on("error", reject);
        },
      );
      req.on("timeout", () => req.destroy(new Error(`envd of sandbox ${sandboxId} did not answer ${opts.path} in time`)));
      req.on("error", reject);
      req.end(payload);
    });
  }

  /** Polls GET /health until 204 or the deadline. */
  async waitReady(
    endpoint: Endpoint,
    timeoutMs: number,
    isAlive: () => Promise<boolean>,
    /** False while the sandbox must not be dialed yet (Instance.vsockReady). */
    canDial: () => boolean = () => true,
  ): Promise<void> {
    const sandboxId = endpoint.sandboxId;
    const deadline = Date.now() + timeoutMs;
    let last = "no answer yet";
    // A connect to a socket that is not there yet fails in microseconds: poll
    // often, so a ready envd is found at once (it is on the create latency path).
    // After a second it is a booting VM: poll gently, each dial reaches its guest.
    const start = Date.now();
    while (Date.now() < deadline) {
      if (!canDial()) {
        if (!(await isAlive())) throw new Error(`sandbox ${sandboxId} exited while starting (its guest never got to listen on vsock)`);
        await new Promise((r) => setTimeout(r, 20));
        continue;
      }
      const delay = Date.now() - start < 1_000 ? 3 : 50;
      try {
        const res = await this.request(endpoint, { method: "GET", path: "/health", timeoutMs: 2_000 });
        if (res.status === 204) return;
        last = `GET /health answered ${res.status}`;
      } catch (err) {
        last = (err as Error).message;
      }
      if (!(await isAlive())) throw new Error(`sandbox ${sandboxId} exited while starting (${last})`);
      await new Promise((r) => setTimeout(r, delay));
    }
    throw new Error(`envd of sandbox ${sandboxId} was not ready within ${timeoutMs} ms (${last})`);
  }
}
