import { Code, ConnectError, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import type { IncomingMessage, ServerResponse } from "node:http";
import { Filesystem } from "../../gen/ts/filesystem/filesystem_pb.js";
import { ActivityService } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import { observeFileTransfer } from "../activity/files.js";
import { createActivityService } from "../activity/service.js";
import { Process } from "../../gen/ts/process/process_pb.js";
import { hasValidAccessToken, UNAUTHORIZED_MESSAGE } from "../auth/access-token.js";
import { USER_KEY, userFromAuthorization } from "../auth/user.js";
import type { EnvdContext } from "../context.js";
import { createFilesystemService } from "../filesystem/service.js";
import { queryOf } from "../http/common.js";
import { createHttpRoutes } from "../http/routes.js";
import { sendError } from "../http/json.js";
import { createProcessService } from "../process/service.js";
import { connectAdapter } from "./connect-adapter.js";
import { applyCors } from "./cors.js";
import { createProcessStreams } from "./process-streams.js";
import { registerReflection } from "./reflection.js";

/** 64 MiB: the largest single RPC message envd accepts (uploads go through /files). */
const READ_MAX_BYTES = 64 * 1024 * 1024;

/**
 * Resolves the Basic-auth user once per RPC, before the handler runs (an
 * unknown user is `unauthenticated` whatever the method); handlers read it
 * back with requestUser().
 */
function userInterceptor(ctx: EnvdContext): Interceptor {
  return (next) => async (req) => {
    req.contextValues.set(USER_KEY, userFromAuthorization(ctx, req.header.get("authorization")));
    return next(req);
  };
}

export interface EnvdHandler {
  handle(req: IncomingMessage, res: ServerResponse): void;
  close(): Promise<void>;
}

/**
 * The whole of envd's request handling: CORS, the access-token gate, plain
 * HTTP routes (/health, /files, /init, /envs, /metrics) and the Connect
 * services (process, filesystem, gRPC reflection) in every protocol.
 */
export function createEnvdHandler(ctx: EnvdContext): EnvdHandler {
  const processes = createProcessService(ctx);
  const filesystem = createFilesystemService(ctx);
  const http = createHttpRoutes(ctx);
  // Start and Connect over HTTP/1.1 Connect (the SDKs' process streams) skip connect-es's message pipeline.
  const processStreams = createProcessStreams(ctx, processes.impl, READ_MAX_BYTES, (req, res, body) => rpc(req, res, body));
  const rpc = connectAdapter({
    readMaxBytes: READ_MAX_BYTES,
    // Compressed requests are accepted, but responses are never compressed:
    // process output is mostly incompressible or tiny, and gzip doubled envd's
    // CPU per streamed GiB (the E2B SDKs never ask for it).
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    jsonOptions: { ignoreUnknownFields: true },
    // A Start whose spawn waits its turn (process/handler/spawn-turns.ts) is answered with headers meanwhile.
    eagerStreamHeaders: true,
    interceptors: [userInterceptor(ctx)],
    routes(router: ConnectRouter) {
      router.service(Process, processes.impl);
      router.service(Filesystem, filesystem.impl);
      router.service(ActivityService, createActivityService(ctx));
      registerReflection(router, [Process.file, Filesystem.file, ActivityService.file]);
    },
    fallback(_req, res) {
      sendError(res as ServerResponse, 404, "no such route: envd serves /health, /files, /init, /envs, /metrics and the process.Process and filesystem.Filesystem RPCs");
    },
  });

  return {
    handle(req, res) {
      if (applyCors(req, res)) return;
      const path = (req.url ?? "/").split("?")[0]!;
      if (http.handles(req.method ?? "GET", path)) {
        if (path === "/files") observeFileTransfer(ctx, req, res, queryOf(req));
        http.handle(req, res).catch((err: unknown) => {
          ctx.log.error({ err, path }, "http route failed");
          sendError(res, 500, err instanceof Error ? err.message : String(err));
        });
        return;
      }
      // Everything else is an RPC: it needs the access token once /init set one.
      if (!hasValidAccessToken(ctx.state.accessToken, req.headers)) {
        sendError(res, 401, UNAUTHORIZED_MESSAGE);
        return;
      }
      if (!processStreams(req, res)) rpc(req, res);
    },
    async close() {
      processes.close();
      filesystem.close();
    },
  };
}

export function internalError(err: unknown): ConnectError {
  return err instanceof ConnectError ? err : new ConnectError(err instanceof Error ? err.message : String(err), Code.Internal);
}
