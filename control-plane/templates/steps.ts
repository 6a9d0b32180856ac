// A build's spec as the SDKs send it (TemplateBuildStartV2), read and checked
// before anything runs: the base, every step's type and arguments, the files
// of COPY steps, and limits. A spec that passes runs; one that does not is a
// 400 that names the step and what is wrong.
import { createHash } from "node:crypto";
import { ControlPlaneError } from "../domain/errors.js";
import type { BuildSpec, BuildStep, RegistryAuth } from "../domain/template.js";
import { printable } from "./names.js";

/** More steps than this is refused (E2B's SDK makes one step per call; real templates have tens). */
export const MAX_STEPS = 500;
/** One argument (a RUN command, an ENV value) longer than this is refused. */
const MAX_ARG = 64 * 1024;

export const STEP_TYPES = ["RUN", "COPY", "ADD", "ENV", "WORKDIR", "USER", "ARG"] as const;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const USER_NAME = /^[a-z_][a-z0-9_-]{0,31}$/;
const HASH = /^[0-9a-f]{64}$/;

function bad(message: string): never {
  throw new ControlPlaneError("invalid", message);
}

function str(v: unknown, what: string): string {
  if (typeof v !== "string") bad(`${what} must be a string`);
  if (v.length > MAX_ARG) bad(`${what} is ${v.length} characters long: at most ${MAX_ARG}`);
  if (v.includes("\0")) bad(`${what} contains a NUL character`);
  return v;
}

/** The JSON body of POST /v2/templates/{id}/builds/{buildID}, typed; credentials apart. */
export function readBuildStart(body: Record<string, unknown>): { spec: BuildSpec; auth?: RegistryAuth } {
  const spec: BuildSpec = { force: false, steps: [] };
  if (body.fromImage !== undefined && body.fromImage !== null) spec.fromImage = str(body.fromImage, "fromImage");
  if (body.fromTemplate !== undefined && body.fromTemplate !== null) spec.fromTemplate = str(body.fromTemplate, "fromTemplate");
  if (body.force !== undefined && body.force !== null) {
    if (typeof body.force !== "boolean") bad("force must be a boolean");
    spec.force = body.force;
  }
  for (const key of ["startCmd", "readyCmd"] as const) {
    const v = body[key];
    if (v !== undefined && v !== null && v !== "") spec[key] = str(v, key);
  }
  const steps = body.steps ?? [];
  if (!Array.isArray(steps)) bad("steps must be an array");
  if (steps.length > MAX_STEPS) bad(`the template has ${steps.length} steps: at most ${MAX_STEPS} are accepted (merge RUN commands with &&)`);
  spec.steps = steps.map((raw, i) => readStep(raw, i + 1));
  const auth = body.fromImageRegistry === undefined || body.fromImageRegistry === null ? undefined : readAuth(body.fromImageRegistry);
  return { spec, ...(auth ? { auth } : {}) };
}

function readStep(raw: unknown, n: number): BuildStep {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) bad(`step ${n} must be an object with a type and args`);
  const o = raw as Record<string, unknown>;
  const type = str(o.type, `step ${n}: type`).toUpperCase();
  const args = o.args ?? [];
  if (!Array.isArray(args)) bad(`step ${n} (${type}): args must be an array of strings`);
  const step: BuildStep = { type, args: args.map((a, j) => str(a, `step ${n} (${type}): args[${j}]`)) };
  if (o.filesHash !== undefined && o.filesHash !== null && o.filesHash !== "") step.filesHash = str(o.filesHash, `step ${n}: filesHash`);
  if (o.force === true) step.force = true;
  return step;
}

function readAuth(raw: unknown): RegistryAuth {
  if (typeof raw !== "object" || raw === null) bad("fromImageRegistry must be an object with a type (registry, aws or gcp)");
  const o = raw as Record<string, unknown>;
  const field = (k: string) => str(o[k], `fromImageRegistry.${k}`);
  switch (o.type) {
    case "registry":
      return { type: "registry", username: field("username"), password: field("password") };
    case "aws":
      return { type: "aws", awsAccessKeyId: field("awsAccessKeyId"), awsSecretAccessKey: field("awsSecretAccessKey"), awsRegion: field("awsRegion") };
    case "gcp":
      return { type: "gcp", serviceAccountJson: field("serviceAccountJson") };
    default:
      return bad(`fromImageRegistry.type must be registry, aws or gcp, got ${JSON.stringify(o.type)}`);
  }
}

/** A COPY/ADD source: relative, inside the uploaded files (the SDK checks the same). */
function checkSource(src: string, where: string): void {
  if (src === "") bad(`${where}: the source is empty`);
  if (src.startsWith("/")) bad(`${where}: the source '${printable(src)}' is absolute: sources are relative to the template's files`);
  if (src.split("/").includes("..")) bad(`${where}: the source '${printable(src)}' leaves the template's files ('..')`);
}

/** Checks a spec before it is queued: everything a step needs is there and well formed. */
export function checkBuildSpec(spec: BuildSpec, ctx: { fileKnown: (hash: string) => boolean; fromTemplate: (ref: string) => string | undefined }): void {
  if (spec.fromImage !== undefined && spec.fromTemplate !== undefined) bad("give fromImage or fromTemplate, not both");
  if (spec.fromImage !== undefined && spec.fromImage.trim() === "") bad("fromImage is empty");
  if (spec.fromTemplate !== undefined) {
    const problem = ctx.fromTemplate(spec.fromTemplate);
    if (problem) bad(problem);
  }
  spec.steps.forEach((step, i) => checkStep(step, i + 1, ctx.fileKnown));
}

function checkStep(step: BuildStep, n: number, fileKnown: (hash: string) => boolean): void {
  const where = `step ${n} (${step.type})`;
  const a = step.args;
  switch (step.type) {
    case "RUN":
      if (a.length < 1 || a.length > 2 || a[0]!.trim() === "") bad(`${where}: expected [command, user?], got ${a.length} argument(s)`);
      if (a[1] && !USER_NAME.test(a[1])) bad(`${where}: invalid user '${printable(a[1])}'`);
      return;
    case "COPY":
    case "ADD": {
      if (a.length < 2 || a.length > 4) bad(`${where}: expected [source, destination, user?, mode?]`);
      const [src, dest, user, mode] = a as [string, string, string?, string?];
      if (dest === "") bad(`${where}: the destination is empty`);
      if (user && !USER_NAME.test(user.split(":")[0]!)) bad(`${where}: invalid user '${printable(user)}'`);
      if (mode && !/^0?[0-7]{3,4}$/.test(mode)) bad(`${where}: invalid mode '${printable(mode)}': expected octal, e.g. 0644`);
      if (step.type === "ADD" && /^https?:\/\//.test(src)) return;
      checkSource(src, where);
      if (!step.filesHash) bad(`${where}: no filesHash: upload the files first (the SDK does it in Template.build)`);
      if (!HASH.test(step.filesHash)) bad(`${where}: invalid filesHash '${printable(step.filesHash)}'`);
      if (!fileKnown(step.filesHash)) bad(`${where}: the files of '${printable(src)}' (hash ${step.filesHash}) were never uploaded: ask for an upload URL (REST: GET /templates/{templateID}/files/{hash}; Connect: GetFileUploadUrl) and PUT them there`);
      return;
    }
    case "ENV":
      if (a.length === 0 || a.length % 2 !== 0) bad(`${where}: expected [name, value, name, value, …]`);
      for (let i = 0; i < a.length; i += 2) if (!ENV_NAME.test(a[i]!)) bad(`${where}: invalid variable name '${printable(a[i]!)}'`);
      return;
    case "WORKDIR":
      if (a.length !== 1 || a[0]!.trim() === "") bad(`${where}: expected [path]`);
      return;
    case "USER":
      if (a.length < 1 || a.length > 2 || !USER_NAME.test(a[0]!)) bad(`${where}: expected [name, sudo?] with a user name of lowercase letters, digits, '_' and '-', got '${printable(a[0] ?? "")}'`);
      return;
    case "ARG":
      if (a.length < 1 || a.length > 2 || !ENV_NAME.test(a[0]!)) bad(`${where}: expected [name, default?]`);
      return;
    default:
      bad(`step ${n}: unknown step type '${printable(step.type)}' (known: ${STEP_TYPES.join(", ")})`);
  }
}

/**
 * The cache key of each step's result: the hash of the key before it and
 * the step itself (its files by their hash), so a change at step n changes
 * the keys of n and every later step, and nothing before it.
 */
export function stepKeys(baseKey: string, steps: BuildStep[]): string[] {
  const keys: string[] = [];
  let prev = baseKey;
  for (const s of steps) {
    prev = createHash("sha256")
      .update(JSON.stringify({ prev, type: s.type, args: s.args, files: s.filesHash ?? null }))
      .digest("hex");
    keys.push(prev);
  }
  return keys;
}
