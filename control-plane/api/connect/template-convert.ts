// Domain ↔ wire for TemplateService: templates, builds, tags and log entries
// to their messages; a StartBuildRequest to the build start the template
// service takes, read by the same code as E2B's REST body (templates/steps.ts),
// so both APIs accept and refuse the same specs with the same messages.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BuildLogLevel,
  BuildStatus,
  type BuildLogEntrySchema,
  type RegistryCredentials,
  type StartBuildRequest,
  type TemplateBuildSchema,
  type TemplateSchema,
  type TemplateTagSchema,
} from "../../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import type { BuildLogEntry, BuildStatus as DomainStatus, TemplateBuildRecord, TemplateTagRecord } from "../../domain/template.js";
import { readBuildStart } from "../../templates/steps.js";
import type { BuildStart, TemplateView } from "../../templates/template-service.js";

type Level = BuildLogEntry["level"];

const STATUSES: Record<DomainStatus, BuildStatus> = {
  waiting: BuildStatus.WAITING,
  building: BuildStatus.BUILDING,
  ready: BuildStatus.READY,
  error: BuildStatus.ERROR,
};

const LEVELS: Record<Level, BuildLogLevel> = {
  debug: BuildLogLevel.DEBUG,
  info: BuildLogLevel.INFO,
  warn: BuildLogLevel.WARN,
  error: BuildLogLevel.ERROR,
};

const u32 = (n: number) => Math.max(0, Math.min(0xffffffff, Math.trunc(n)));

export function statusToProto(s: DomainStatus): BuildStatus {
  return STATUSES[s];
}

/** Whether a build has ended. */
export function finished(s: DomainStatus): boolean {
  return s === "ready" || s === "error";
}

/** The minimum level a request asks for; undefined (every level) for UNSPECIFIED, INVALID_ARGUMENT for an unknown number. */
export function levelFromProto(level: BuildLogLevel): Level | undefined {
  if (level === BuildLogLevel.UNSPECIFIED) return undefined;
  const found = (Object.entries(LEVELS) as [Level, BuildLogLevel][]).find(([, v]) => v === level);
  if (!found) throw new ConnectError(`invalid level ${level}: expected BUILD_LOG_LEVEL_DEBUG, _INFO, _WARN or _ERROR`, Code.InvalidArgument);
  return found[0];
}

export function logEntryToProto(e: BuildLogEntry): MessageInitShape<typeof BuildLogEntrySchema> {
  return { timestamp: timestampFromMs(e.timestamp), level: LEVELS[e.level], message: e.message, step: e.step ?? "" };
}

/** A build; `reasonEntries` are its failed step's last log lines (status and watch answers only). */
export function buildToProto(b: TemplateBuildRecord, reasonEntries: BuildLogEntry[] = []): MessageInitShape<typeof TemplateBuildSchema> {
  return {
    buildId: b.id,
    templateId: b.templateId,
    status: STATUSES[b.status],
    ...(b.reason ? { reason: { message: b.reason.message, step: b.reason.step ?? "", logEntries: reasonEntries.map(logEntryToProto) } } : {}),
    cpuCount: u32(b.cpuCount),
    memoryMb: u32(b.memoryMB),
    diskSizeMb: u32(b.diskSizeMB),
    tags: [...b.tags],
    envdVersion: b.envdVersion,
    createdAt: timestampFromMs(b.createdAt),
    updatedAt: timestampFromMs(b.updatedAt),
    ...(b.finishedAt !== undefined ? { finishedAt: timestampFromMs(b.finishedAt) } : {}),
    rootfsBytes: BigInt(Math.max(0, Math.trunc(b.result?.rootfsBytes ?? 0))),
  };
}

/** A template as E2B's Template shows it: the newest ready build (else the newest) and the newest build's status. */
export function templateToProto(v: TemplateView): MessageInitShape<typeof TemplateSchema> {
  const t = v.template;
  const latest = v.builds[0];
  const shown = v.builds.find((b) => b.status === "ready") ?? latest;
  return {
    templateId: t.id,
    names: [...t.names],
    public: t.public,
    builtIn: t.builtIn === true,
    cpuCount: u32(t.cpuCount),
    memoryMb: u32(t.memoryMB),
    diskSizeMb: u32(t.diskSizeMB),
    createdAt: timestampFromMs(t.createdAt),
    updatedAt: timestampFromMs(t.updatedAt),
    ...(t.lastSpawnedAt !== undefined ? { lastSpawnedAt: timestampFromMs(t.lastSpawnedAt) } : {}),
    spawnCount: BigInt(Math.max(0, t.spawnCount)),
    buildCount: u32(t.buildCount),
    buildId: shown?.id ?? "",
    buildStatus: latest ? STATUSES[latest.status] : BuildStatus.WAITING,
    envdVersion: shown?.envdVersion ?? "",
  };
}

export function tagToProto(t: TemplateTagRecord): MessageInitShape<typeof TemplateTagSchema> {
  return { tag: t.tag, buildId: t.buildId, createdAt: timestampFromMs(t.createdAt) };
}

/** E2B's fromImageRegistry of the REST body. */
function registryBody(r: RegistryCredentials): Record<string, unknown> {
  const c = r.credentials;
  switch (c.case) {
    case "login":
      return { type: "registry", username: c.value.username, password: c.value.password };
    case "aws":
      return { type: "aws", awsAccessKeyId: c.value.awsAccessKeyId, awsSecretAccessKey: c.value.awsSecretAccessKey, awsRegion: c.value.awsRegion };
    case "gcp":
      return { type: "gcp", serviceAccountJson: c.value.serviceAccountJson };
    default:
      throw new ConnectError("from_image_registry is set without credentials: give login, aws or gcp", Code.InvalidArgument);
  }
}

/**
 * The build start a request asks for, read as E2B's REST body is (the
 * proto's JSON names are the REST body's names, so messages fit both).
 * The spec's deeper checks (steps, files, base) are the service's.
 */
export function buildStartFromProto(req: StartBuildRequest): BuildStart {
  if (req.fromImageRegistry && req.base.case !== "fromImage") throw new ConnectError("from_image_registry is for from_image: give the image it is for, or drop the credentials", Code.InvalidArgument);
  return readBuildStart({
    ...(req.base.case === "fromImage" ? { fromImage: req.base.value } : {}),
    ...(req.base.case === "fromTemplate" ? { fromTemplate: req.base.value } : {}),
    ...(req.fromImageRegistry ? { fromImageRegistry: registryBody(req.fromImageRegistry) } : {}),
    force: req.force,
    startCmd: req.startCmd,
    readyCmd: req.readyCmd,
    steps: req.steps.map((s) => ({ type: s.type, args: s.args, filesHash: s.filesHash, force: s.force })),
  });
}
