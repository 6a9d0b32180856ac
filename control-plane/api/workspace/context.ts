import type { IncomingMessage, ServerResponse } from "node:http";
import type { ApiKeyInfo } from "../../store/store.js";
import type { WorkspaceDeps } from "./deps.js";

/** What a workspace route handler gets. */
export interface WsContext {
  req: IncomingMessage;
  res: ServerResponse;
  params: Record<string, string>;
  query: URLSearchParams;
  deps: WorkspaceDeps;
  /** The caller's API key (undefined only on the unauthenticated /health). */
  key: ApiKeyInfo | undefined;
  /** Aborted when the client goes away before the answer is complete. */
  signal: AbortSignal;
  /** What the audit entry of this request records beside the route (safe facts only). */
  audit: { sandboxId?: string; details?: Record<string, unknown> };
}

export type WsHandler = (ctx: WsContext) => Promise<void>;
