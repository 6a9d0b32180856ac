// E2B's snapshot and fork endpoints: POST /sandboxes/{id}/snapshots,
// GET /snapshots (paged by X-Next-Token; each item also says its sandbox,
// template, kind, size and time) and POST /sandboxes/{id}/fork.
// DELETE /templates/{id} (how the SDKs delete a snapshot) and
// GET /templates/aliases/{alias} are in templates.ts: snapshots answer them too.
import { ControlPlaneError } from "../../domain/errors.js";
import { toSnapshotInfo } from "../../snapshots/names.js";
import type { SnapshotService } from "../../snapshots/snapshot-service.js";
import { pageSnapshots } from "../../snapshots/paging.js";
import type { ApiDeps } from "../deps.js";
import { Fields, parseLimit, readJsonObject } from "./body.js";
import { HttpError, httpErrorFrom, sendJson } from "./errors.js";
import type { RestContext, Route } from "./router.js";
import { toSandbox } from "./serialize.js";

/** Fork's defaults and bounds, as in the spec's SandboxForkRequest. */
const FORK_DEFAULT_TIMEOUT = 15;
const FORK_MAX_COUNT = 100;

function service(deps: ApiDeps): SnapshotService {
  if (!deps.snapshots) throw new HttpError(400, "snapshots and fork are not available on this server");
  return deps.snapshots;
}

async function createSnapshot({ req, res, params, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const name = f.string("name");
  // `memory` (newer SDKs: Python's mode="filesystem" sends false): the kind asked for; absent, the best the runtime takes.
  const snap = await service(deps).create(params.sandboxID!, name === "" ? undefined : name, f.bool("memory"));
  sendJson(res, 201, toSnapshotInfo(snap));
}

async function listSnapshots({ res, query, deps }: RestContext): Promise<void> {
  const limit = parseLimit(query.get("limit"));
  const all = await service(deps).list({ sandboxId: query.get("sandboxID") || undefined, name: query.get("name") || undefined });
  const { items, next } = pageSnapshots(all, limit, query.get("nextToken") || undefined);
  // E2B's SnapshotInfo, and (locale2b's, for the dashboard) where it came from, when, its kind and size.
  const info = items.map((s) => ({ ...toSnapshotInfo(s), sandboxID: s.sandboxId, templateID: s.templateId, kind: s.kind, sizeBytes: s.sizeBytes, createdAt: new Date(s.createdAt).toISOString() }));
  sendJson(res, 200, info, next ? { "x-next-token": next } : {});
}

function forkError(err: Error): { code: number; message: string } {
  if (err instanceof ControlPlaneError) {
    const http = httpErrorFrom(err);
    return { code: http.status, message: http.message };
  }
  return { code: 500, message: `internal error: ${err.message}` };
}

async function fork({ req, res, params, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const timeout = f.int("timeout", 0) ?? FORK_DEFAULT_TIMEOUT;
  const count = f.int("count", 1, FORK_MAX_COUNT) ?? 1;
  if (timeout === 0) throw new HttpError(400, "field 'timeout' must be a positive number of seconds");
  const outcomes = await service(deps).fork(params.sandboxID!, { timeout, count });
  sendJson(
    res,
    201,
    outcomes.map((o) => ("sandbox" in o ? { sandbox: toSandbox(o.sandbox, deps.publicDomain) } : { error: forkError(o.error) })),
  );
}

export const snapshotRoutes: Route[] = [
  { method: "POST", path: "/sandboxes/:sandboxID/snapshots", handler: createSnapshot },
  { method: "POST", path: "/sandboxes/:sandboxID/fork", handler: fork },
  { method: "GET", path: "/snapshots", handler: listSnapshots },
];
