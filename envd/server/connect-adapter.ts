import { Code, ConnectError, createConnectRouter } from "@connectrpc/connect";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
  type ConnectNodeAdapterOptions,
} from "@connectrpc/connect-node";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { answerAsConnectGo } from "./connect-answers.js";

export type NodeHandler = (req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse) => void;

/**
 * connect-node's `connectNodeAdapter`, with every RPC answering as
 * connect-go does where the two differ (connect-answers.ts): envd and the
 * control plane serve their Connect services through this.
 */
export function connectAdapter(options: ConnectNodeAdapterOptions): NodeHandler {
  const router = createConnectRouter({ acceptCompression: [compressionGzip, compressionBrotli], ...options });
  options.routes(router);
  const paths = new Map<string, UniversalHandler>();
  for (const handler of router.handlers) paths.set((options.requestPathPrefix ?? "") + handler.requestPath, answerAsConnectGo(handler));
  return (req, res) => {
    const handler = paths.get((req.url ?? "").split("?", 1)[0]!);
    if (!handler) {
      if (options.fallback) options.fallback(req, res);
      else res.writeHead(404).end();
      return;
    }
    const uReq = universalRequestFromNodeRequest(req, res, undefined, options.contextValues?.(req));
    handler(uReq)
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((reason: unknown) => {
        // The client went away: nothing to answer.
        if (ConnectError.from(reason).code !== Code.Aborted) {
          console.error(`handler for rpc ${handler.method.name} of ${handler.service.typeName} failed`, reason);
        }
      });
  };
}
