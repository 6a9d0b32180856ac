// The Connect API, locale2b.controlplane.v1.SandboxService: E2B's lifecycle
// operations with E2B's semantics (over Connect, gRPC and gRPC-web) plus a
// stream of lifecycle events. Every RPC needs an API key.
import { Code, ConnectError, type ConnectRouter, type Interceptor } from "@connectrpc/connect";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { performance } from "node:perf_hooks";
import {
  SandboxService,
  TimeoutAction,
  type CreateSandboxRequest,
} from "../../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import type { CreateSandboxInput } from "../../domain/sandbox.js";
import { apiKeyFromHeaders, MISSING_KEY_MESSAGE } from "../auth.js";
import type { ApiDeps } from "../deps.js";
import { rpcCall } from "./call.js";
import { required, sandboxToProto, stateFromProto } from "./convert.js";
import { auditInterceptor, CALLER_KEY } from "./audit.js";
import { page } from "./paging.js";
import { snapshotHandlers } from "./snapshots.js";
import { watchEvents } from "./watch.js";

/** Timeout when a request leaves it 0, in seconds (as the E2B SDKs default). */
export const DEFAULT_TIMEOUT_SECONDS = 300;

/** UNAUTHENTICATED unless the request carries a valid key (X-API-KEY or Authorization: Bearer). */
export function authInterceptor(deps: Pick<ApiDeps, "store">): Interceptor {
  return (next) => async (req) => {
    const known = req.contextValues.get(CALLER_KEY);
    const key = known === undefined ? await apiKeyFromHeaders(deps.store, req.header) : known;
    if (!key) throw new ConnectError(MISSING_KEY_MESSAGE, Code.Unauthenticated);
    return next(req);
  };
}

function positive(value: number | undefined, field: string): number | undefined {
  if (value === undefined) return undefined;
  if (value <= 0) throw new ConnectError(`${field} must be positive when set`, Code.InvalidArgument);
  return value;
}

function createInput(req: CreateSandboxRequest): CreateSandboxInput {
  const templateId = required(req.templateId, "template_id");
  if (req.onTimeout !== TimeoutAction.UNSPECIFIED && req.onTimeout !== TimeoutAction.KILL && req.onTimeout !== TimeoutAction.PAUSE) {
    throw new ConnectError(`invalid on_timeout ${req.onTimeout}`, Code.InvalidArgument);
  }
  return {
    templateId,
    timeout: req.timeoutSeconds || DEFAULT_TIMEOUT_SECONDS,
    metadata: { ...req.metadata },
    envVars: { ...req.envVars },
    autoPause: req.onTimeout === TimeoutAction.PAUSE,
    autoResume: req.autoResume,
    allowInternetAccess: req.allowInternetAccess,
    cpuCount: positive(req.cpuCount, "cpu_count"),
    memoryMB: positive(req.memoryMb, "memory_mb"),
  };
}

export function registerSandboxService(router: ConnectRouter, deps: ApiDeps): void {
  const { manager, metrics } = deps;
  const log = deps.log.child({ component: "connect-api" });

  const call = rpcCall(log);

  router.service(
    SandboxService,
    {
      createSandbox: (req) =>
        call("CreateSandbox", undefined, async () => {
          const input = createInput(req);
          const t0 = performance.now();
          const rec = await (deps.snapshots && (await deps.snapshots.names(input.templateId)) ? deps.snapshots.createSandbox(input) : manager.create(input));
          metrics.observeCreate((performance.now() - t0) / 1000);
          return { sandbox: sandboxToProto(rec) };
        }),

      getSandbox: (req) =>
        call("GetSandbox", req.sandboxId, async () => ({
          sandbox: sandboxToProto(manager.get(required(req.sandboxId, "sandbox_id"))),
        })),

      listSandboxes: (req) =>
        call("ListSandboxes", undefined, async () => {
          const states = req.states.map(stateFromProto);
          const all = await manager.listWithEnded({ states, metadata: { ...req.metadata } });
          const { items, next } = page(all, req.limit, req.pageToken);
          return { sandboxes: items.map(sandboxToProto), nextPageToken: next };
        }),

      pauseSandbox: (req) =>
        call("PauseSandbox", req.sandboxId, async () => {
          await manager.pause(required(req.sandboxId, "sandbox_id"), req.memory);
          return {};
        }),

      resumeSandbox: (req) =>
        call("ResumeSandbox", req.sandboxId, async () => {
          const id = required(req.sandboxId, "sandbox_id");
          const t0 = performance.now();
          const { sandbox, resumed } = await manager.connect(id, req.timeoutSeconds || DEFAULT_TIMEOUT_SECONDS, req.memory);
          if (resumed) metrics.observeResume((performance.now() - t0) / 1000);
          return { sandbox: sandboxToProto(sandbox), resumed };
        }),

      killSandbox: (req) =>
        call("KillSandbox", req.sandboxId, async () => {
          await manager.kill(required(req.sandboxId, "sandbox_id"));
          return {};
        }),

      setSandboxTimeout: (req) =>
        call("SetSandboxTimeout", req.sandboxId, async () => {
          const rec = await manager.setTimeout(required(req.sandboxId, "sandbox_id"), req.timeoutSeconds);
          return { endAt: timestampFromMs(rec.endAt) };
        }),

      watchSandboxEvents: (req, ctx) => watchEvents(manager.events, req, ctx, undefined, deps.events, (id) => manager.record(id)),

      ...snapshotHandlers(deps, call),
    },
    { interceptors: [auditInterceptor(deps), authInterceptor(deps)] },
  );
}
