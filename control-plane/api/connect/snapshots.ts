// SandboxService's snapshot RPCs: CreateSnapshot, ListSnapshots,
// DeleteSnapshot and ForkSandbox, over the same SnapshotService as E2B's
// REST endpoints (api/rest/snapshots.ts), with the same semantics.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type {
  CreateSnapshotRequest,
  DeleteSnapshotRequest,
  ForkSandboxRequest,
  ListSnapshotsRequest,
  SnapshotSchema,
} from "../../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { snapshotId, snapshotNames } from "../../snapshots/names.js";
import { pageSnapshots } from "../../snapshots/paging.js";
import type { SnapshotService } from "../../snapshots/snapshot-service.js";
import type { SnapshotRecord } from "../../domain/snapshot.js";
import type { ApiDeps } from "../deps.js";
import type { Call } from "./call.js";
import { required, sandboxToProto, toConnectError } from "./convert.js";
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from "./paging.js";

const FORK_DEFAULT_TIMEOUT = 15;
const FORK_MAX_COUNT = 100;

export function snapshotToProto(s: SnapshotRecord): MessageInitShape<typeof SnapshotSchema> {
  return {
    snapshotId: snapshotId(s),
    names: snapshotNames(s),
    id: s.id,
    tag: s.tag,
    name: s.name ?? "",
    sandboxId: s.sandboxId,
    templateId: s.templateId,
    runtime: s.runtime,
    kind: s.kind,
    createdAt: timestampFromMs(s.createdAt),
    sizeBytes: BigInt(Math.max(0, Math.trunc(s.sizeBytes))),
  };
}

function service(deps: ApiDeps): SnapshotService {
  if (!deps.snapshots) throw new ConnectError("snapshots and fork are not available on this server", Code.InvalidArgument);
  return deps.snapshots;
}

/** The snapshot handlers of SandboxService, run through the service's `call` (error mapping and logs). */
export function snapshotHandlers(deps: ApiDeps, call: Call) {
  return {
    createSnapshot: (req: CreateSnapshotRequest) =>
      call("CreateSnapshot", req.sandboxId, async () => {
        const snap = await service(deps).create(required(req.sandboxId, "sandbox_id"), req.name || undefined, req.memory);
        return { snapshot: snapshotToProto(snap) };
      }),

    listSnapshots: (req: ListSnapshotsRequest) =>
      call("ListSnapshots", req.sandboxId || undefined, async () => {
        const all = await service(deps).list({ sandboxId: req.sandboxId || undefined, name: req.name || undefined });
        const limit = req.limit === 0 ? DEFAULT_PAGE_SIZE : Math.min(req.limit, MAX_PAGE_SIZE);
        const { items, next } = pageSnapshots(all, limit, req.pageToken || undefined);
        return { snapshots: items.map(snapshotToProto), nextPageToken: next };
      }),

    deleteSnapshot: (req: DeleteSnapshotRequest) =>
      call("DeleteSnapshot", undefined, async () => {
        const ref = required(req.snapshotId, "snapshot_id");
        if (!(await service(deps).delete(ref))) throw new ConnectError(`snapshot '${ref}' not found`, Code.NotFound);
        return {};
      }),

    forkSandbox: (req: ForkSandboxRequest) =>
      call("ForkSandbox", req.sandboxId, async () => {
        const count = req.count || 1;
        if (count > FORK_MAX_COUNT) throw new ConnectError(`count must be between 1 and ${FORK_MAX_COUNT}, got ${count}`, Code.InvalidArgument);
        const outcomes = await service(deps).fork(required(req.sandboxId, "sandbox_id"), { timeout: req.timeoutSeconds || FORK_DEFAULT_TIMEOUT, count });
        return {
          results: outcomes.map((o) => {
            if ("sandbox" in o) return { sandbox: sandboxToProto(o.sandbox) };
            const ce = toConnectError(o.error);
            return { errorCode: Code[ce.code].replace(/[A-Z]/g, (c, i: number) => (i ? "_" : "") + c.toLowerCase()), errorMessage: ce.rawMessage };
          }),
        };
      }),
  };
}
