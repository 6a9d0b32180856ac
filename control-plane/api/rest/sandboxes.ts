import { performance } from "node:perf_hooks";
import type { CreateSandboxInput, SandboxRecord, SandboxState } from "../../domain/sandbox.js";
import type { VolumeMount } from "../../domain/volume.js";
import { Fields, parseLimit, readJsonObject } from "./body.js";
import { HttpError, sendJson, sendNoContent } from "./errors.js";
import { parseNetworkConfig } from "./network-body.js";
import type { RestContext, Route } from "./router.js";
import { apiState, managerStates, toDetail, toListed, toSandbox, type ApiState } from "./serialize.js";

/** NewSandbox (POST /sandboxes, v1: default timeout 15 s) and NewSandboxV2 (POST /v2/sandboxes: 300 s, always secured). */
export function parseNewSandbox(body: Record<string, unknown>, v2: boolean): CreateSandboxInput {
  const f = new Fields(body);
  const templateId = f.requiredString("templateID");
  const timeout = f.int("timeout") ?? (v2 ? 300 : 15);
  const autoPause = f.bool("autoPause");
  const autoPauseMemory = f.bool("autoPauseMemory");
  const autoResumeObj = f.object("autoResume");
  const autoResume = autoResumeObj ? new Fields(autoResumeObj).bool("enabled") : undefined;
  if (autoPauseMemory === false && autoResume) {
    throw new HttpError(400, "autoPauseMemory: false (filesystem-only auto-pause) cannot be combined with autoResume");
  }
  const secure = v2 ? true : f.bool("secure");
  const allowInternetAccess = f.bool("allow_internet_access");
  const networkBody = f.object("network");
  const network = networkBody ? parseNetworkConfig(networkBody, !!secure) : undefined;
  const metadata = f.stringMap("metadata");
  const envVars = f.stringMap("envVars");
  if (f.object("mcp")) throw new HttpError(400, "field 'mcp': the MCP gateway is not supported by this server");
  const volumeMounts = parseVolumeMounts(f.array("volumeMounts"));
  f.object("iam");
  return {
    templateId,
    timeout,
    ...(metadata ? { metadata } : {}),
    ...(envVars ? { envVars } : {}),
    ...(autoPause !== undefined ? { autoPause } : {}),
    ...(autoPauseMemory !== undefined ? { autoPauseMemory } : {}),
    ...(autoResume !== undefined ? { autoResume } : {}),
    ...(allowInternetAccess !== undefined ? { allowInternetAccess } : {}),
    ...(network ? { network } : {}),
    ...(volumeMounts.length ? { volumeMounts } : {}),
  };
}

/** E2B's SandboxVolumeMount list: `{name, path}` objects (the manager checks the names and paths themselves). */
function parseVolumeMounts(list: unknown[] | undefined): VolumeMount[] {
  return (list ?? []).map((m, i) => {
    if (!m || typeof m !== "object" || Array.isArray(m)) throw new HttpError(400, `volumeMounts[${i}]: expected an object {"name": "<volume name>", "path": "/mnt/data"}`);
    const { name, path } = m as Record<string, unknown>;
    if (typeof name !== "string" || typeof path !== "string") throw new HttpError(400, `volumeMounts[${i}]: 'name' (the volume's name) and 'path' (absolute, inside the sandbox) are required strings`);
    return { name, path };
  });
}

function create(v2: boolean) {
  return async ({ req, res, deps, note }: RestContext): Promise<void> => {
    const input = parseNewSandbox(await readJsonObject(req), v2);
    const started = performance.now();
    // A snapshot's id or name as templateID: a sandbox on its files (as E2B, where snapshots are templates).
    const rec = await (deps.snapshots && (await deps.snapshots.names(input.templateId)) ? deps.snapshots.createSandbox(input) : deps.manager.create(input));
    if (note) note.sandboxId = rec.id;
    deps.metrics.observeCreate((performance.now() - started) / 1000);
    sendJson(res, 201, toSandbox(rec, deps.publicDomain));
  };
}

function decode(s: string, what: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new HttpError(400, `invalid metadata filter: ${what} '${s}' is not valid URL encoding`);
  }
}

/**
 * The `metadata` list filter. The SDKs URL-encode each key and value, join
 * them as a query string and send that string URL-encoded once more: after
 * the query parameter's own decoding, parse it as a query string and decode
 * each key and value once more. `user=abc&app=prod` sent plainly works too.
 */
export function parseMetadataFilter(raw: string | null): Record<string, string> | undefined {
  if (raw === null || raw === "") return undefined;
  const out: Record<string, string> = {};
  for (const pair of raw.split("&")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    const k = eq < 0 ? pair : pair.slice(0, eq);
    const v = eq < 0 ? "" : pair.slice(eq + 1);
    const key = decode(decode(k, "key"), "key");
    if (key === "") throw new HttpError(400, `invalid metadata filter '${raw}': empty key`);
    out[key] = decode(decode(v, "value"), "value");
  }
  return Object.keys(out).length ? out : undefined;
}

function parseStates(query: URLSearchParams): ApiState[] {
  const states = query
    .getAll("state")
    .flatMap((s) => s.split(","))
    .map((s) => s.trim())
    .filter(Boolean);
  for (const s of states) {
    if (s !== "running" && s !== "paused") throw new HttpError(400, `invalid state '${s}': expected running or paused`);
  }
  return states.length ? [...new Set(states as ApiState[])] : ["running", "paused"];
}

/** Opaque page cursor: the sort key (startedAt, id) of the last item handed out. */
function encodeToken(rec: SandboxRecord): string {
  return Buffer.from(`${rec.startedAt}:${rec.id}`).toString("base64url");
}

function decodeToken(token: string): { startedAt: number; id: string } {
  const m = /^(\d+):([a-z0-9]+)$/.exec(Buffer.from(token, "base64url").toString("utf8"));
  if (!m) throw new HttpError(400, `invalid nextToken '${token}'`);
  return { startedAt: Number(m[1]), id: m[2]! };
}

function compareAsc(a: { startedAt: number; id: string }, b: { startedAt: number; id: string }): number {
  return a.startedAt - b.startedAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

async function listV2({ res, query, deps }: RestContext): Promise<void> {
  const states = parseStates(query);
  const metadata = parseMetadataFilter(query.get("metadata"));
  const limit = parseLimit(query.get("limit"));
  const order = query.get("order") ?? "desc";
  if (order !== "asc" && order !== "desc") throw new HttpError(400, `invalid order '${order}': expected asc or desc`);
  const template = query.get("template") || undefined;
  let startedAfter: number | undefined;
  const rawAfter = query.get("startedAfter");
  if (rawAfter) {
    startedAfter = Date.parse(rawAfter);
    if (Number.isNaN(startedAfter)) throw new HttpError(400, `invalid startedAfter '${rawAfter}': expected an RFC 3339 date-time`);
  }
  const token = query.get("nextToken");
  const cursor = token ? decodeToken(token) : undefined;

  const managerStateList: SandboxState[] = states.flatMap(managerStates);
  let all = deps.manager.list({
    states: managerStateList,
    ...(metadata ? { metadata } : {}),
    // The store compares strictly; the API means "at or after".
    ...(startedAfter !== undefined ? { startedAfter: startedAfter - 1 } : {}),
  });
  if (template) all = all.filter((r) => r.templateId === template || r.alias === template);
  const sign = order === "asc" ? 1 : -1;
  all.sort((a, b) => sign * compareAsc(a, b));
  const rest = cursor ? all.filter((r) => sign * compareAsc(r, cursor) > 0) : all;
  const page = rest.slice(0, limit);
  const headers: Record<string, string> = {};
  if (rest.length > limit) headers["x-next-token"] = encodeToken(page[page.length - 1]!);
  if (states.includes("running")) headers["x-total-running"] = String(all.filter((r) => apiState(r.state) === "running").length);
  sendJson(res, 200, page.map(toListed), headers);
}

/** Deprecated GET /sandboxes: running sandboxes only, newest first, no paging. */
async function listV1({ res, query, deps }: RestContext): Promise<void> {
  const metadata = parseMetadataFilter(query.get("metadata"));
  const all = deps.manager.list({ states: managerStates("running"), ...(metadata ? { metadata } : {}) });
  all.sort((a, b) => -compareAsc(a, b));
  sendJson(res, 200, all.map(toListed));
}

async function getOne({ res, params, deps }: RestContext): Promise<void> {
  sendJson(res, 200, toDetail(deps.manager.get(params.sandboxID!), deps.publicDomain));
}

async function kill({ res, params, deps }: RestContext): Promise<void> {
  await deps.manager.kill(params.sandboxID!);
  sendNoContent(res);
}

export const sandboxRoutes: Route[] = [
  { method: "POST", path: "/sandboxes", handler: create(false) },
  { method: "GET", path: "/sandboxes", handler: listV1 },
  { method: "POST", path: "/v2/sandboxes", handler: create(true) },
  { method: "GET", path: "/v2/sandboxes", handler: listV2 },
];

/** Routed after the literal `/sandboxes/metrics` (metrics.ts). */
export const sandboxByIdRoutes: Route[] = [
  { method: "GET", path: "/sandboxes/:sandboxID", handler: getOne },
  { method: "DELETE", path: "/sandboxes/:sandboxID", handler: kill },
];
