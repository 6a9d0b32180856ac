// E2B's snapshot and fork endpoints: POST /sandboxes/{id}/snapshots,
// GET /snapshots (paged by X-Next-Token), DELETE /templates/{id} (how the
// SDKs delete a snapshot) and POST /sandboxes/{id}/fork.
import { ControlPlaneError } from "../../manager/types.js";
import { toSnapshotInfo } from "../../snapshots/names.js";
import type { SnapshotService } from "../../snapshots/snapshot-service.js";
import type { SnapshotRecord } from "../../snapshots/types.js";
import type { ApiDeps } from "../deps.js";
import { Fields, readJsonObject } from "./body.js";
import { HttpError, httpErrorFrom, sendJson, sendNoContent } from "./errors.js";
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

function parseLimit(raw: string | null): number {
  if (raw === null || raw === "") return 100;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 100) throw new HttpError(400, `invalid limit '${raw}': expected an integer from 1 to 100`);
  return n;
}

/** Opaque page cursor: the sort key of the last snapshot handed out. */
function encodeToken(s: SnapshotRecord): string {
  return Buffer.from(JSON.stringify([s.createdAt, s.id, s.tag])).toString("base64url");
}

function decodeToken(token: string): [number, string, string] {
  try {
    const v = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as unknown;
    if (Array.isArray(v) && v.length === 3 && typeof v[0] === "number" && typeof v[1] === "string" && typeof v[2] === "string") {
      return v as [number, string, string];
    }
  } catch {
    // below
  }
  throw new HttpError(400, `invalid nextToken '${token}'`);
}

/** Newest first: createdAt, then id, then tag, all descending (the store's order). */
function after(s: SnapshotRecord, [createdAt, id, tag]: [number, string, string]): boolean {
  if (s.createdAt !== createdAt) return s.createdAt < createdAt;
  if (s.id !== id) return s.id < id;
  return s.tag < tag;
}

async function listSnapshots({ res, query, deps }: RestContext): Promise<void> {
  const limit = parseLimit(query.get("limit"));
  const token = query.get("nextToken");
  const cursor = token ? decodeToken(token) : undefined;
  const all = service(deps).list({ sandboxId: query.get("sandboxID") || undefined, name: query.get("name") || undefined });
  const rest = cursor ? all.filter((s) => after(s, cursor)) : all;
  const page = rest.slice(0, limit);
  const headers: Record<string, string> = {};
  if (rest.length > limit) headers["x-next-token"] = encodeToken(page[page.length - 1]!);
  sendJson(res, 200, page.map(toSnapshotInfo), headers);
}

/** DELETE /templates/{id}: the SDKs' deleteSnapshot. Built templates are the CLI's to remove. */
async function deleteSnapshot({ res, params, deps }: RestContext): Promise<void> {
  const ref = params.templateID!;
  const snapshots = service(deps);
  if (snapshots.delete(ref)) return sendNoContent(res);
  if (snapshots.isTemplate(ref)) throw new HttpError(400, `'${ref}' is a template, not a snapshot: remove templates with 'locale2b template' on the server`);
  throw new HttpError(404, `snapshot '${ref}' not found`);
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
  { method: "DELETE", path: "/templates/:templateID", handler: deleteSnapshot },
];
