import http from "node:http";
import type {
  BootSource,
  Drive,
  InstanceActionInfo,
  InstanceInfo,
  LoggerConfig,
  MachineConfiguration,
  MetricsConfig,
  NetworkInterface,
  SnapshotCreateParams,
  SnapshotLoadParams,
  Vsock,
} from "./api-types.js";

/** How long one API call may take unless the call says otherwise. */
export const DEFAULT_API_TIMEOUT_MS = 10_000;
/** Snapshot create/load move the guest's whole memory through the disk: they get longer. */
export const SNAPSHOT_TIMEOUT_MS = 120_000;

/**
 * A failed Firecracker API call. `call` is `PUT /boot-source`-style;
 * `faultMessage` is Firecracker's own `fault_message` when it answered with
 * one; `status` is the HTTP status (undefined when there was no answer).
 */
export class FirecrackerApiError extends Error {
  constructor(
    message: string,
    readonly call: string,
    readonly status?: number,
    readonly faultMessage?: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = "FirecrackerApiError";
  }
}

export interface ApiClientOptions {
  /** Per-call time limit (default 10 s); snapshot calls get at least SNAPSHOT_TIMEOUT_MS. */
  timeoutMs?: number;
}

/**
 * A small HTTP/1.1 client for one Firecracker process's API socket, with a
 * typed method per call the runtime uses. Every call has a time limit and
 * fails with a FirecrackerApiError that names the call and carries
 * Firecracker's fault message; none hangs.
 */
export class FirecrackerApi {
  private readonly timeoutMs: number;

  constructor(
    readonly socketPath: string,
    opts: ApiClientOptions = {},
  ) {
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_API_TIMEOUT_MS;
  }

  putMachineConfig(body: MachineConfiguration): Promise<void> {
    return this.call("PUT", "/machine-config", body);
  }

  putBootSource(body: BootSource): Promise<void> {
    return this.call("PUT", "/boot-source", body);
  }

  putDrive(body: Drive): Promise<void> {
    return this.call("PUT", `/drives/${encodeURIComponent(body.drive_id)}`, body);
  }

  putVsock(body: Vsock): Promise<void> {
    return this.call("PUT", "/vsock", body);
  }

  putNetworkInterface(body: NetworkInterface): Promise<void> {
    return this.call("PUT", `/network-interfaces/${encodeURIComponent(body.iface_id)}`, body);
  }

  putLogger(body: LoggerConfig): Promise<void> {
    return this.call("PUT", "/logger", body);
  }

  putMetrics(body: MetricsConfig): Promise<void> {
    return this.call("PUT", "/metrics", body);
  }

  action(action_type: InstanceActionInfo["action_type"]): Promise<void> {
    const body: InstanceActionInfo = { action_type };
    return this.call("PUT", "/actions", body);
  }

  /** Boots the configured microVM. */
  instanceStart(): Promise<void> {
    return this.action("InstanceStart");
  }

  sendCtrlAltDel(): Promise<void> {
    return this.action("SendCtrlAltDel");
  }

  /** PATCH /vm {state: Paused}: stops the vCPUs (memory stays in the process). */
  pauseVm(): Promise<void> {
    return this.call("PATCH", "/vm", { state: "Paused" });
  }

  resumeVm(): Promise<void> {
    return this.call("PATCH", "/vm", { state: "Resumed" });
  }

  /** Writes the VM state and its memory to files; the VM must be paused. */
  createSnapshot(body: SnapshotCreateParams): Promise<void> {
    return this.call("PUT", "/snapshot/create", body, Math.max(this.timeoutMs, SNAPSHOT_TIMEOUT_MS));
  }

  /** Restores a snapshot into this (fresh) Firecracker process. */
  loadSnapshot(body: SnapshotLoadParams): Promise<void> {
    return this.call("PUT", "/snapshot/load", body, Math.max(this.timeoutMs, SNAPSHOT_TIMEOUT_MS));
  }

  describeInstance(): Promise<InstanceInfo> {
    return this.call<InstanceInfo>("GET", "/");
  }

  /**
   * One request: JSON body out, 2xx → parsed JSON (or undefined on 204),
   * anything else → FirecrackerApiError with the fault message.
   */
  call<T = void>(method: string, path: string, body?: unknown, timeoutMs = this.timeoutMs): Promise<T> {
    const name = `${method} ${path}`;
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const finish = (err: FirecrackerApiError | undefined, value?: T) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) reject(err);
        else resolve(value as T);
      };
      const req = http.request(
        {
          socketPath: this.socketPath,
          agent: false,
          method,
          path,
          headers: {
            host: "localhost",
            accept: "application/json",
            ...(payload ? { "content-type": "application/json", "content-length": String(payload.length) } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("error", (err) => finish(this.transportError(name, err)));
          res.on("end", () => {
            const status = res.statusCode ?? 0;
            const text = Buffer.concat(chunks).toString("utf8");
            let json: unknown;
            try {
              json = text ? JSON.parse(text) : undefined;
            } catch {
              json = undefined;
            }
            if (status >= 200 && status < 300) {
              finish(undefined, json as T);
              return;
            }
            const fault = (json as { fault_message?: unknown } | undefined)?.fault_message;
            const faultMessage = typeof fault === "string" ? fault : text.trim() || undefined;
            finish(
              new FirecrackerApiError(
                `firecracker API ${name} failed (HTTP ${status})${faultMessage ? `: ${faultMessage}` : ""}`,
                name,
                status,
                faultMessage,
              ),
            );
          });
        },
      );
      const timer = setTimeout(() => {
        finish(
          new FirecrackerApiError(
            `firecracker API ${name} did not answer within ${timeoutMs} ms (socket ${this.socketPath})`,
            name,
            undefined,
            undefined,
            "ETIMEDOUT",
          ),
        );
        req.destroy();
      }, timeoutMs);
      req.on("error", (err) => finish(this.transportError(name, err)));
      req.end(payload);
    });
  }

  private transportError(name: string, err: NodeJS.ErrnoException): FirecrackerApiError {
    return new FirecrackerApiError(
      `firecracker API ${name} failed: cannot talk to ${this.socketPath} (${err.code ?? err.message})`,
      name,
      undefined,
      undefined,
      err.code,
    );
  }
}
