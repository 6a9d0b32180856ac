// Test helpers for the Connect API: generated clients over Connect JSON,
// Connect binary and gRPC, a watcher that collects WatchSandboxEvents, and
// `buf curl`.
import { ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  SandboxEventType,
  SandboxService,
  type WatchSandboxEventsRequest,
  type WatchSandboxEventsResponse,
} from "../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { TemplateService } from "../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { WatchSandboxEventsRequestSchema } from "../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";

export type SandboxClient = Client<typeof SandboxService>;
export type TemplateClient = Client<typeof TemplateService>;
/** Connect JSON and binary over HTTP/1.1 (as the E2B SDKs reach a server on http://), gRPC over h2c. */
export type Protocol = "connect-json" | "connect-binary" | "grpc";

const root = fileURLToPath(new URL("../..", import.meta.url));
const BUF = join(root, "node_modules", ".bin", "buf");

function headers(h: Record<string, string>): Interceptor {
  return (next) => async (req) => {
    for (const [k, v] of Object.entries(h)) req.header.set(k, v);
    return next(req);
  };
}

function transport(url: string, protocol: Protocol, auth: Record<string, string>) {
  const interceptors = [headers(auth)];
  return protocol === "grpc"
    ? createGrpcTransport({ baseUrl: url, interceptors })
    : createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: protocol === "connect-binary", interceptors });
}

/** A SandboxService client; `auth` are extra request headers (x-api-key by default). */
export function apiClient(url: string, protocol: Protocol, auth: Record<string, string>): SandboxClient {
  return createClient(SandboxService, transport(url, protocol, auth));
}

/** A TemplateService client, as apiClient. */
export function templateClient(url: string, protocol: Protocol, auth: Record<string, string>): TemplateClient {
  return createClient(TemplateService, transport(url, protocol, auth));
}

/** The error a promise rejects with (as a ConnectError), or a failure when it resolves. */
export async function rejection(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail, but it succeeded");
}

export interface Watcher {
  /** The first message: SUBSCRIBED (its id: the newest logged event then, with event_types or after_id). */
  subscribed: WatchSandboxEventsResponse;
  /** The next event (SUBSCRIBED included); rejects when the stream failed. */
  next(): Promise<WatchSandboxEventsResponse>;
  /** Events until (and including) one that matches, skipping none: all are returned. */
  until(pred: (e: WatchSandboxEventsResponse) => boolean): Promise<WatchSandboxEventsResponse[]>;
  close(): void;
}

/** Opens a watch and resolves once the server says the subscription is active. */
export async function watch(client: SandboxClient, req: MessageInitShape<typeof WatchSandboxEventsRequestSchema>): Promise<Watcher> {
  const ac = new AbortController();
  const queue: WatchSandboxEventsResponse[] = [];
  let failure: unknown;
  let ended = false;
  let wake: (() => void) | undefined;
  void (async () => {
    try {
      for await (const ev of client.watchSandboxEvents(req as WatchSandboxEventsRequest, { signal: ac.signal })) {
        queue.push(ev);
        wake?.();
      }
    } catch (err) {
      if (!ac.signal.aborted) failure = err;
    } finally {
      ended = true;
      wake?.();
    }
  })();
  const next = async (): Promise<WatchSandboxEventsResponse> => {
    for (;;) {
      if (queue.length) return queue.shift()!;
      if (failure) throw failure;
      if (ended) throw new Error("the watch stream ended");
      await new Promise<void>((r) => (wake = r));
    }
  };
  const first = await next();
  if (first.type !== SandboxEventType.SUBSCRIBED) throw new Error(`first event is ${SandboxEventType[first.type]}, not SUBSCRIBED`);
  return {
    subscribed: first,
    next,
    async until(pred) {
      const out: WatchSandboxEventsResponse[] = [];
      for (;;) {
        const e = await next();
        out.push(e);
        if (pred(e)) return out;
      }
    },
    close: () => ac.abort(),
  };
}

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** `buf curl`, asynchronously: the server runs in this process, so a sync spawn would deadlock. */
export function bufCurl(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(BUF, ["curl", ...args], { timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}
