// The Connect API's templates, locale2b.controlplane.v1.TemplateService: the
// operations of E2B's template API (api/rest/templates.ts) over the same
// TemplateService, with the same semantics and messages, plus WatchBuild.
// Every RPC needs an API key.
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { TemplateService as TemplateRpc, type RequestBuildRequest } from "../../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import { parseTemplateRef } from "../../templates/names.js";
import type { TemplateService } from "../../templates/template-service.js";
import { TemplateFiles } from "../../templates/uploads.js";
import type { ApiDeps } from "../deps.js";
import { auditInterceptor } from "./audit.js";
import { watchBuild } from "./build-watch.js";
import { rpcCall, rpcStream } from "./call.js";
import { required } from "./convert.js";
import { pageById } from "./paging.js";
import { authInterceptor } from "./service.js";
import { buildStartFromProto, buildToProto, levelFromProto, logEntryToProto, tagToProto, templateToProto } from "./template-convert.js";

/** The most log entries one GetBuildStatus answers with. */
const MAX_LOG_PAGE = 1000;
const DEFAULT_LOG_PAGE = 100;

/** A RequestBuild's vCPUs and memory, in the ranges E2B's REST API takes. */
function resources(req: RequestBuildRequest): { cpuCount?: number; memoryMB?: number } {
  const inRange = (v: number | undefined, field: string, min: number, max: number) => {
    if (v !== undefined && (v < min || v > max)) throw new ConnectError(`${field} must be from ${min} to ${max}, got ${v}`, Code.InvalidArgument);
    return v;
  };
  const cpuCount = inRange(req.cpuCount, "cpu_count", 1, 64);
  const memoryMB = inRange(req.memoryMb, "memory_mb", 128, 256 * 1024);
  return { ...(cpuCount !== undefined ? { cpuCount } : {}), ...(memoryMB !== undefined ? { memoryMB } : {}) };
}

/**
 * The scheme and host the client reached this server at, for upload URLs (a
 * proxy in front says so in X-Forwarded-*), as the REST API makes them.
 */
function baseUrlOf(ctx: HandlerContext): string {
  const url = new URL(ctx.url);
  const proto = (ctx.requestHeader.get("x-forwarded-proto") ?? "").split(",")[0]!.trim() || url.protocol.replace(/:$/, "");
  const host = (ctx.requestHeader.get("x-forwarded-host") ?? "").split(",")[0]!.trim() || url.host;
  return `${proto === "https" ? "https" : "http"}://${host}`;
}

export function registerTemplateService(router: ConnectRouter, deps: ApiDeps): void {
  const log = deps.log.child({ component: "connect-api" });
  const call = rpcCall(log);
  const stream = rpcStream(log);
  const templates = (): TemplateService => {
    if (!deps.templates) throw new ConnectError("template builds are not available on this server", Code.Unimplemented);
    return deps.templates;
  };

  router.service(
    TemplateRpc,
    {
      requestBuild: (req) =>
        call("RequestBuild", undefined, async () => {
          const r = await templates().requestBuild({ name: required(req.name, "name"), tags: req.tags, ...resources(req) });
          return { templateId: r.template.id, buildId: r.build.id, names: r.template.names, tags: r.tags, public: r.template.public };
        }),

      getFileUploadUrl: (req, ctx) =>
        call("GetFileUploadUrl", undefined, async () => {
          const ref = required(req.templateId, "template_id");
          const hash = required(req.filesHash, "files_hash");
          TemplateFiles.checkHash(hash);
          const r = await templates().fileUpload(ref, hash, baseUrlOf(ctx));
          return { present: r.present, url: r.url ?? "" };
        }),

      startBuild: (req) =>
        call("StartBuild", undefined, async () => {
          const ref = required(req.templateId, "template_id");
          const buildId = required(req.buildId, "build_id");
          await templates().startBuild(ref, buildId, buildStartFromProto(req));
          return {};
        }),

      getBuildStatus: (req) =>
        call("GetBuildStatus", undefined, async () => {
          const limit = req.limit === 0 ? DEFAULT_LOG_PAGE : Math.min(req.limit, MAX_LOG_PAGE);
          const r = await templates().status(required(req.templateId, "template_id"), required(req.buildId, "build_id"), {
            offset: req.logsOffset,
            limit,
            level: levelFromProto(req.level),
          });
          return { build: buildToProto(r.build, r.reasonEntries), logEntries: r.entries.map(logEntryToProto) };
        }),

      watchBuild: (req, ctx) => stream("WatchBuild", () => watchBuild(templates(), req, ctx.signal)),

      listTemplates: (req) =>
        call("ListTemplates", undefined, async () => {
          const { items, next } = pageById(await templates().list(), (v) => v.template.id, req.limit, req.pageToken, "template");
          return { templates: items.map(templateToProto), nextPageToken: next };
        }),

      getTemplate: (req) =>
        call("GetTemplate", undefined, async () => {
          const v = await templates().get(required(req.templateId, "template_id"));
          const { items, next } = pageById(v.builds, (b) => b.id, req.limit, req.pageToken, "build");
          return { template: templateToProto(v), builds: items.map((b) => buildToProto(b)), tags: v.tags.map(tagToProto), nextPageToken: next };
        }),

      updateTemplate: (req) =>
        call("UpdateTemplate", undefined, async () => {
          const ref = required(req.templateId, "template_id");
          const t = await templates().setPublic(ref, req.public);
          return { template: templateToProto(await templates().get(t.id)) };
        }),

      deleteTemplate: (req) =>
        call("DeleteTemplate", undefined, async () => {
          await templates().delete(required(req.templateId, "template_id"));
          return {};
        }),

      assignTags: (req) =>
        call("AssignTags", undefined, async () => {
          const r = await templates().assignTags(required(req.target, "target"), req.tags);
          return { buildId: r.buildId, tags: r.tags };
        }),

      deleteTags: (req) =>
        call("DeleteTags", undefined, async () => {
          await templates().deleteTags(required(req.name, "name"), req.tags);
          return {};
        }),

      listTags: (req) =>
        call("ListTags", undefined, async () => ({ tags: (await templates().get(required(req.templateId, "template_id"))).tags.map(tagToProto) })),

      templateExists: (req) =>
        call("TemplateExists", undefined, async () => {
          const name = required(req.name, "name");
          const parsed = parseTemplateRef(name);
          if ("problem" in parsed) throw new ConnectError(parsed.problem, Code.InvalidArgument);
          const template = await templates().alias(name);
          const snapshot = template ? undefined : await deps.snapshots?.alias(name);
          const found = template ?? snapshot;
          return found ? { exists: true, templateId: found.templateID, public: found.public, snapshot: snapshot !== undefined } : { exists: false };
        }),
    },
    { interceptors: [auditInterceptor(deps), authInterceptor(deps)] },
  );
}
