// E2B's template API: what the Template SDK (Template.build,
// buildInBackground, getBuildStatus, exists, tags) and the E2B CLI call.
// Snapshot templates answer DELETE /templates/{id} and the alias check too
// (snapshots.ts has the snapshot side).
import type { IncomingMessage } from "node:http";
import type { BuildLogEntry, TemplateBuildRecord, TemplateRecord } from "../../domain/template.js";
import { readBuildStart } from "../../templates/steps.js";
import type { TemplateService, TemplateView } from "../../templates/template-service.js";
import { TemplateFiles, UploadTooLarge } from "../../templates/uploads.js";
import type { ApiDeps } from "../deps.js";
import { Fields, readJsonObject } from "./body.js";
import { HttpError, sendJson, sendNoContent } from "./errors.js";
import type { RestContext, Route } from "./router.js";

/** A build start carries every step: bigger than the API's other bodies. */
const BUILD_BODY_BYTES = 8 * 1024 * 1024;

function service(deps: ApiDeps): TemplateService {
  if (!deps.templates) throw new HttpError(400, "template builds are not available on this server");
  return deps.templates;
}

const iso = (ms: number | undefined): string | null => (ms === undefined ? null : new Date(ms).toISOString());

function lastReady(v: TemplateView): TemplateBuildRecord | undefined {
  return v.builds.find((b) => b.status === "ready");
}

/** What E2B's Template and TemplateLegacy share. */
function templateFields(t: TemplateRecord, buildId: string, envdVersion: string): Record<string, unknown> {
  return {
    templateID: t.id,
    buildID: buildId,
    cpuCount: t.cpuCount,
    memoryMB: t.memoryMB,
    diskSizeMB: t.diskSizeMB,
    public: t.public,
    aliases: t.names,
    createdAt: iso(t.createdAt),
    updatedAt: iso(t.updatedAt),
    createdBy: null,
    lastSpawnedAt: iso(t.lastSpawnedAt),
    spawnCount: t.spawnCount,
    buildCount: t.buildCount,
    envdVersion,
  };
}

/**
 * E2B's Template: buildID is the last ready build's (else the newest),
 * buildStatus the newest's; `sizeBytes` (locale2b's own) is the root
 * filesystem of that ready build: what the template takes on disk.
 */
function toTemplate(v: TemplateView): Record<string, unknown> {
  const ready = lastReady(v);
  const latest = v.builds[0];
  return {
    ...templateFields(v.template, ready?.id ?? latest?.id ?? "", (ready ?? latest)?.envdVersion ?? ""),
    names: v.template.names,
    buildStatus: latest?.status ?? "waiting",
    ...(ready?.result ? { sizeBytes: ready.result.rootfsBytes } : {}),
  };
}

/** E2B's TemplateLegacy (the v2 create's answer). */
function toLegacy(t: TemplateRecord, build: TemplateBuildRecord): Record<string, unknown> {
  return templateFields(t, build.id, build.envdVersion);
}

function toBuild(b: TemplateBuildRecord): Record<string, unknown> {
  return {
    buildID: b.id,
    status: b.status,
    createdAt: iso(b.createdAt),
    updatedAt: iso(b.updatedAt),
    ...(b.finishedAt !== undefined ? { finishedAt: iso(b.finishedAt) } : {}),
    cpuCount: b.cpuCount,
    memoryMB: b.memoryMB,
    diskSizeMB: b.diskSizeMB,
    envdVersion: b.envdVersion,
  };
}

function toLogEntry(e: BuildLogEntry): Record<string, unknown> {
  return { timestamp: new Date(e.timestamp).toISOString(), message: e.message, level: e.level, ...(e.step !== undefined ? { step: e.step } : {}) };
}

/** The plain-text form of a log entry (TemplateBuildInfo.logs). */
function logLine(e: BuildLogEntry): string {
  return `${new Date(e.timestamp).toISOString()} [${e.level}]${e.step ? ` [${e.step}]` : ""} ${e.message}`;
}

function readInt(query: URLSearchParams, name: string, dflt: number, min: number, max: number): number {
  const raw = query.get(name);
  if (raw === null || raw === "") return dflt;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) throw new HttpError(400, `invalid ${name} '${raw}': expected an integer from ${min} to ${max}`);
  return n;
}

function readLevel(query: URLSearchParams): BuildLogEntry["level"] | undefined {
  const raw = query.get("level");
  if (raw === null || raw === "") return undefined;
  if (!["debug", "info", "warn", "error"].includes(raw)) throw new HttpError(400, `invalid level '${raw}': expected debug, info, warn or error`);
  return raw as BuildLogEntry["level"];
}

function strings(f: Fields, body: Record<string, unknown>, name: string): string[] | undefined {
  if (!f.has(name)) return undefined;
  const v = body[name];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string")) throw new HttpError(400, `field '${name}' must be an array of strings`);
  return v as string[];
}

function resources(f: Fields): { cpuCount?: number; memoryMB?: number } {
  const cpuCount = f.int("cpuCount", 1, 64);
  const memoryMB = f.int("memoryMB", 128, 256 * 1024);
  return { ...(cpuCount !== undefined ? { cpuCount } : {}), ...(memoryMB !== undefined ? { memoryMB } : {}) };
}

/** POST /v3/templates. */
async function createV3({ req, res, deps }: RestContext): Promise<void> {
  const body = await readJsonObject(req);
  const f = new Fields(body);
  const name = f.string("name") || f.string("alias");
  if (!name) throw new HttpError(400, "field 'name' is required (the template's name, optionally name:tag)");
  const r = await service(deps).requestBuild({ name, tags: strings(f, body, "tags"), ...resources(f) });
  sendJson(res, 202, { templateID: r.template.id, buildID: r.build.id, public: r.template.public, names: r.template.names, aliases: r.template.names, tags: r.tags });
}

/** POST /v2/templates (deprecated, still sent by older SDKs). */
async function createV2({ req, res, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const r = await service(deps).requestBuild({ name: f.requiredString("alias"), ...resources(f) });
  sendJson(res, 202, toLegacy(r.template, r.build));
}

/** POST /templates and POST /templates/{id} (Dockerfile builds through E2B's old CLI). */
async function legacyDockerfile(): Promise<void> {
  throw new HttpError(400, "Dockerfile builds through the old CLI are not supported: use the Template SDK (Template.fromDockerfile(...) then Template.build), which parses the Dockerfile itself");
}

async function listV1({ res, deps }: RestContext): Promise<void> {
  sendJson(res, 200, (await service(deps).list()).map(toTemplate));
}

async function listV2({ res, query, deps }: RestContext): Promise<void> {
  const limit = readInt(query, "limit", 100, 1, 100);
  const all = await service(deps).list();
  const token = query.get("nextToken");
  const start = token ? all.findIndex((v) => v.template.id === token) : 0;
  if (start < 0) throw new HttpError(400, `invalid nextToken '${token}'`);
  const page = all.slice(start, start + limit);
  const next = all[start + limit];
  sendJson(res, 200, page.map(toTemplate), next ? { "x-next-token": next.template.id } : {});
}

async function getTemplate({ res, params, query, deps }: RestContext): Promise<void> {
  const v = await service(deps).get(params.templateID!);
  const limit = readInt(query, "limit", 100, 1, 100);
  const token = query.get("nextToken");
  const start = token ? v.builds.findIndex((b) => b.id === token) : 0;
  if (start < 0) throw new HttpError(400, `invalid nextToken '${token}'`);
  const next = v.builds[start + limit];
  const t = v.template;
  sendJson(
    res,
    200,
    {
      templateID: t.id,
      public: t.public,
      aliases: t.names,
      names: t.names,
      createdAt: iso(t.createdAt),
      updatedAt: iso(t.updatedAt),
      lastSpawnedAt: iso(t.lastSpawnedAt),
      spawnCount: t.spawnCount,
      builds: v.builds.slice(start, start + limit).map(toBuild),
    },
    next ? { "x-next-token": next.id } : {},
  );
}

/** DELETE /templates/{id}: a snapshot's (the SDKs' deleteSnapshot) or a template's. */
async function deleteTemplate({ res, params, deps }: RestContext): Promise<void> {
  const ref = params.templateID!;
  if (await deps.snapshots?.delete(ref)) return sendNoContent(res);
  if (!deps.templates) throw new HttpError(404, `snapshot '${ref}' not found`);
  await deps.templates.delete(ref);
  sendNoContent(res);
}

async function patchV1({ req, res, params, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  await service(deps).setPublic(params.templateID!, f.bool("public"));
  res.writeHead(200).end();
}

async function patchV2({ req, res, params, deps }: RestContext): Promise<void> {
  const f = new Fields(await readJsonObject(req));
  const t = await service(deps).setPublic(params.templateID!, f.bool("public"));
  sendJson(res, 200, { names: t.names });
}

/** GET /templates/{id}/files/{hash}: present, or where to PUT the files. */
async function fileUploadLink({ req, res, params, deps }: RestContext): Promise<void> {
  TemplateFiles.checkHash(params.hash!);
  sendJson(res, 201, await service(deps).fileUpload(params.templateID!, params.hash!, baseUrlOf(req)));
}

/** The scheme and host a client reached this server at (a proxy in front says so in X-Forwarded-*; HTTP/2 names the host in :authority). */
function baseUrlOf(req: IncomingMessage): string {
  const encrypted = (req.socket as { encrypted?: boolean } | undefined)?.encrypted === true;
  const proto = String(req.headers["x-forwarded-proto"] ?? "").split(",")[0]!.trim() || (encrypted ? "https" : "http");
  const host = String(req.headers["x-forwarded-host"] ?? req.headers.host ?? req.headers[":authority"] ?? "localhost").split(",")[0]!.trim();
  return `${proto === "https" ? "https" : "http"}://${host}`;
}

/** PUT /templates/{id}/files/{hash}?expires&signature: the upload itself, authenticated by its signature, not an API key. */
async function uploadFiles({ req, res, params, query, deps }: RestContext): Promise<void> {
  const templates = service(deps);
  const files = deps.templateFiles!;
  const { templateID, hash } = params as { templateID: string; hash: string };
  TemplateFiles.checkHash(hash);
  const refusal = files.refusal(templateID, hash, query);
  if (refusal) {
    req.resume();
    throw new HttpError(403, refusal);
  }
  if (!(await templates.acceptsFiles(templateID))) {
    req.resume();
    throw new HttpError(404, `template '${templateID}' not found`);
  }
  try {
    const { bytes } = await files.receive(hash, req);
    deps.log.info({ templateId: templateID, hash, bytes }, "template files uploaded");
  } catch (err) {
    if (err instanceof UploadTooLarge) {
      req.resume();
      throw new HttpError(413, `${err.message}: upload fewer files (.dockerignore), or raise LOCALE2B_TEMPLATE_UPLOAD_MAX_MB`);
    }
    throw err;
  }
  res.writeHead(200, { "content-length": "0" }).end();
}

async function startBuild({ req, res, params, deps }: RestContext): Promise<void> {
  const start = readBuildStart(await readJsonObject(req, BUILD_BODY_BYTES));
  await service(deps).startBuild(params.templateID!, params.buildID!, start);
  res.writeHead(202, { "content-length": "0" }).end();
}

async function buildStatus({ res, params, query, deps }: RestContext): Promise<void> {
  const offset = readInt(query, "logsOffset", 0, 0, 2 ** 31 - 1);
  const limit = readInt(query, "limit", 100, 0, 100);
  const { build, entries, reasonEntries } = await service(deps).status(params.templateID!, params.buildID!, { offset, limit, level: readLevel(query) });
  sendJson(res, 200, {
    templateID: build.templateId,
    buildID: build.id,
    status: build.status,
    logs: entries.map(logLine),
    logEntries: entries.map(toLogEntry),
    ...(build.reason ? { reason: { message: build.reason.message, ...(build.reason.step ? { step: build.reason.step } : {}), logEntries: reasonEntries.map(toLogEntry) } } : {}),
  });
}

async function buildLogs({ res, params, query, deps }: RestContext): Promise<void> {
  const limit = readInt(query, "limit", 100, 0, 100);
  const cursorRaw = query.get("cursor");
  const cursor = cursorRaw === null || cursorRaw === "" ? undefined : readInt(query, "cursor", 0, 0, Number.MAX_SAFE_INTEGER);
  const direction = query.get("direction") || "forward";
  if (direction !== "forward" && direction !== "backward") throw new HttpError(400, `invalid direction '${direction}': expected forward or backward`);
  const source = query.get("source");
  if (source && source !== "temporary" && source !== "persistent") throw new HttpError(400, `invalid source '${source}': expected temporary or persistent`);
  const logs = await service(deps).logs(params.templateID!, params.buildID!, { ...(cursor !== undefined ? { cursor } : {}), limit, direction, level: readLevel(query) });
  sendJson(res, 200, { logs: logs.map(toLogEntry) });
}

async function assignTags({ req, res, deps }: RestContext): Promise<void> {
  const body = await readJsonObject(req);
  const f = new Fields(body);
  const r = await service(deps).assignTags(f.requiredString("target"), strings(f, body, "tags") ?? []);
  sendJson(res, 201, { tags: r.tags, buildID: r.buildId });
}

async function deleteTags({ req, res, deps }: RestContext): Promise<void> {
  const body = await readJsonObject(req);
  const f = new Fields(body);
  await service(deps).deleteTags(f.requiredString("name"), strings(f, body, "tags") ?? []);
  sendNoContent(res);
}

async function listTags({ res, params, deps }: RestContext): Promise<void> {
  const v = await service(deps).get(params.templateID!);
  sendJson(res, 200, v.tags.map((t) => ({ tag: t.tag, buildID: t.buildId, createdAt: iso(t.createdAt) })));
}

/** GET /templates/aliases/{alias}: E2B's Template.exists; a template, else a snapshot's name. */
async function alias({ res, params, deps }: RestContext): Promise<void> {
  const name = params.alias!;
  const found = (await deps.templates?.alias(name)) ?? (await deps.snapshots?.alias(name));
  if (!found) throw new HttpError(404, `template '${name}' not found`);
  sendJson(res, 200, found);
}

export const templateRoutes: Route[] = [
  { method: "POST", path: "/v3/templates", handler: createV3 },
  { method: "POST", path: "/v2/templates", handler: createV2 },
  { method: "GET", path: "/v2/templates", handler: listV2 },
  { method: "GET", path: "/templates", handler: listV1 },
  { method: "POST", path: "/templates", handler: legacyDockerfile },
  { method: "POST", path: "/templates/tags", handler: assignTags },
  { method: "DELETE", path: "/templates/tags", handler: deleteTags },
  { method: "GET", path: "/templates/aliases/:alias", handler: alias },
  { method: "GET", path: "/templates/:templateID", handler: getTemplate },
  { method: "POST", path: "/templates/:templateID", handler: legacyDockerfile },
  { method: "DELETE", path: "/templates/:templateID", handler: deleteTemplate },
  { method: "PATCH", path: "/templates/:templateID", handler: patchV1 },
  { method: "PATCH", path: "/v2/templates/:templateID", handler: patchV2 },
  { method: "GET", path: "/templates/:templateID/tags", handler: listTags },
  { method: "GET", path: "/templates/:templateID/files/:hash", handler: fileUploadLink },
  { method: "PUT", path: "/templates/:templateID/files/:hash", handler: uploadFiles, signed: true },
  { method: "POST", path: "/v2/templates/:templateID/builds/:buildID", handler: startBuild },
  { method: "POST", path: "/templates/:templateID/builds/:buildID", handler: legacyDockerfile },
  { method: "GET", path: "/templates/:templateID/builds/:buildID/status", handler: buildStatus },
  { method: "GET", path: "/templates/:templateID/builds/:buildID/logs", handler: buildLogs },
];
