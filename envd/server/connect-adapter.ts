import { Code, ConnectError, createConnectRouter } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
  type ConnectNodeAdapterOptions,
} from "@connectrpc/connect-node";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { answerAsConnectGo } from "./connect-answers.js";

export interface AdapterExtras {
  /**
   * A Connect server stream (Start, Connect, WatchDir) whose first message is
   * not ready by the next turn of the event loop gets its response headers
   * then (connect-es sends them only with the first message): a client sees
   * its stream accepted while, e.g., its spawn waits its turn.
   */
  eagerStreamHeaders?: boolean;
}

/** `body`: the request body when it was read already (the request stream is then not read again). */
export type NodeHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, body?: Uint8Array) => void;

/**
 * connect-node's `connectNodeAdapter`, with every RPC answering as
 * connect-go does where the two differ (connect-answers.ts): envd and the
 * control plane serve their Connect services through this.
 */
export function connectAdapter(options: ConnectNodeAdapterOptions & AdapterExtras): NodeHandler {
  const router = createConnectRouter({ acceptCompression: [compressionGzip, compressionBrotli], ...options });
  options.routes(router);
  const paths = new Map<string, UniversalHandler>();
  for (const handler of router.handlers) paths.set((options.requestPathPrefix ?? "") + handler.requestPath, answerAsConnectGo(handler));
  return (req, res, body) => {
    const handler = paths.get((req.url ?? "").split("?", 1)[0]!);
    if (!handler) {
      if (options.fallback) options.fallback(req, res);
      else res.writeHead(404).end();
      return;
    }
    const uReq = universalRequestFromNodeRequest(req, res, undefined, options.contextValues?.(req));
    if (body) uReq.body = oneChunk(body);
    const early = options.eagerStreamHeaders ? earlyHeaders(handler, req, res) : undefined;
    handler(uReq)
      .then((uRes) => universalResponseToNodeResponse(early ? early.settle(uRes) : uRes, res))
      .catch((reason: unknown) => {
        // The client went away: nothing to answer.
        if (ConnectError.from(reason).code !== Code.Aborted) {
          console.error(`handler for rpc ${handler.method.name} of ${handler.service.typeName} failed`, reason);
        }
      });
  };
}

async function* oneChunk(body: Uint8Array): AsyncIterable<Uint8Array> {
  yield body;
}

const CONNECT_STREAM = /^application\/connect\+(json|proto)$/;

/**
 * Sends a Connect server stream's headers on the next turn unless the
 * handler answered first. Only where they are known before the handler
 * runs: the Connect protocol's 200 with the request's content type (gRPC
 * answers differ, and a compressed request may get a compressed answer).
 */
function earlyHeaders(
  handler: UniversalHandler,
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
): { settle(uRes: UniversalServerResponse): UniversalServerResponse } | undefined {
  const type = req.headers["content-type"];
  if (handler.method.methodKind !== "server_streaming" || req.method !== "POST" || !type || !CONNECT_STREAM.test(type)) return undefined;
  if (req.headers["connect-content-encoding"] && req.headers["connect-content-encoding"] !== "identity") return undefined;
  let settled = false;
  let sent = false;
  setImmediate(() => {
    if (settled || res.headersSent || res.destroyed) return;
    sent = true;
    (res as ServerResponse).writeHead(200, { "content-type": type });
    if ("flushHeaders" in res) res.flushHeaders(); // HTTP/2 sends them on writeHead
  });
  return {
    settle(uRes) {
      settled = true;
      if (!sent) return uRes;
      // connect-node writes the head with the first message: it went out already.
      if (uRes.status !== 200) res.destroy(new Error(`stream answered ${uRes.status} after its headers were sent`));
      (res as { writeHead: unknown }).writeHead = () => res;
      return uRes;
    },
  };
}
