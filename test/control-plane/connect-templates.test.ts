// The Connect API's templates (locale2b.controlplane.v1.TemplateService)
// through the generated TS client over Connect JSON, Connect binary and gRPC
// (h2c), against a real control plane on the process runtime: a build with
// RUN, ENV and COPY steps (its files PUT to the signed URL the API gives),
// watched to ready by two clients at once; a sandbox from it (SandboxService)
// has the build's files and env; a failing build ends in ERROR naming its
// step; bad input is INVALID_ARGUMENT or NOT_FOUND with a message saying
// what to fix; `buf curl` reaches it through reflection.
// Needs root and the base template image (npm test builds it).
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BuildLogLevel,
  BuildStatus,
  type WatchBuildRequest,
  type WatchBuildResponse,
} from "../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { StartBuildRequestSchema, WatchBuildRequestSchema } from "../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { apiClient, bufCurl, rejection, templateClient, type Protocol, type TemplateClient } from "../helpers/connect-api.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { testImagesDir } from "../helpers/vm.js";

const dir = testImagesDir();
const runtime = new ProcessRuntime({ imagesDir: dir });
const caps = await runtime.capabilities();
const skip =
  caps.mode !== "sandbox"
    ? "template builds need the control plane to run as root (sandbox mode)"
    : (caps.missing ??
      (findTemplateImage("base", dir) ? undefined : `the base template is not built in ${dir} (locale2b template build base; npm test builds it as root)`));
const why = skip ? ` (skipped: ${skip})` : "";

const BUILD_MS = 600_000;
const PROTOCOLS: Protocol[] = ["connect-json", "connect-binary", "grpc"];

let cp: TestControlPlane;
let work: string;
beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime, imagesDir: dir });
  work = mkdtempSync(join(tmpdir(), "locale2b-connect-templates-"));
});
afterAll(async () => {
  if (cp) {
    // The builds' images live in the shared image cache: delete what this file made.
    const api = templateClient(cp.url, "connect-json", { "x-api-key": cp.apiKey });
    for (const t of (await api.listTemplates({})).templates) if (!t.builtIn) await api.deleteTemplate({ templateId: t.templateId }).catch(() => undefined);
  }
  await cp?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

const client = (protocol: Protocol): TemplateClient => templateClient(cp.url, protocol, { "x-api-key": cp.apiKey });
const unique = (what: string) => `${what}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

/** Every message of a WatchBuild stream, to its end. */
async function watchAll(api: TemplateClient, req: MessageInitShape<typeof WatchBuildRequestSchema>): Promise<WatchBuildResponse[]> {
  const out: WatchBuildResponse[] = [];
  for await (const m of api.watchBuild(req as WatchBuildRequest, { timeoutMs: BUILD_MS })) out.push(m);
  return out;
}

/**
 * Opens a watch and waits for its first message (the watch is on); then
 * every message, to the end, each handed to `onMessage` as it arrives.
 */
async function openWatch(
  api: TemplateClient,
  req: MessageInitShape<typeof WatchBuildRequestSchema>,
  onMessage: (m: WatchBuildResponse) => Promise<void> = async () => {},
): Promise<{ all: Promise<WatchBuildResponse[]> }> {
  const it = api.watchBuild(req as WatchBuildRequest, { timeoutMs: BUILD_MS })[Symbol.asyncIterator]();
  const first = await it.next();
  const all = (async () => {
    const out: WatchBuildResponse[] = first.done ? [] : [first.value];
    for (let n = await it.next(); !n.done; n = await it.next()) {
      out.push(n.value);
      await onMessage(n.value);
    }
    return out;
  })();
  return { all };
}

/** A gzipped tar of `files` (path → content) and its sha256, as the Template SDK uploads a COPY step's files. */
function tarOf(files: Record<string, string>): { tar: Buffer; hash: string } {
  const root = mkdtempSync(join(work, "files-"));
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(root, path, ".."), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  const out = join(work, `${Math.random().toString(36).slice(2)}.tgz`);
  execFileSync("tar", ["-czf", out, "-C", root, "."]);
  const tar = readFileSync(out);
  return { tar, hash: createHash("sha256").update(tar).digest("hex") };
}

const lines = (msgs: WatchBuildResponse[]) => msgs.filter((m) => m.logEntry).map((m) => m.logEntry!.message);

describe.skipIf(skip !== undefined)(`TemplateService: a build, watched to ready, and a sandbox from it${why}`, () => {
  it(
    "request, upload the COPY files, start (RUN/ENV/COPY), watch over gRPC and Connect JSON at once, create a sandbox from it",
    async () => {
      const json = client("connect-json");
      const binary = client("connect-binary");
      const grpc = client("grpc");
      const name = unique("connect-build");
      // In the steps, so that no step's result is in the step cache from an earlier run: every step runs.
      const nonce = name.slice(name.lastIndexOf("-") + 1);

      const req = await json.requestBuild({ name: `${name}:v1`, tags: ["stable"], cpuCount: 1, memoryMb: 512 });
      expect(req).toMatchObject({ names: [name], public: false });
      expect(req.tags.sort()).toEqual(["stable", "v1"]);
      expect(req.templateId).toMatch(/^[a-z0-9]{20}$/);
      const { templateId, buildId } = req;

      const files = tarOf({ "app/hello.txt": "hello from a COPY step\n", "app/sub/data.txt": "42\n" });
      const link = await binary.getFileUploadUrl({ templateId: name, filesHash: files.hash });
      expect(link.present).toBe(false);
      expect(link.url).toMatch(new RegExp(`^${cp.url}/templates/${templateId}/files/${files.hash}\\?expires=\\d+&signature=[0-9a-f]{64}$`));
      // The signed URL needs no API key.
      const put = await fetch(link.url, { method: "PUT", body: files.tar });
      expect(put.status).toBe(200);
      expect(await grpc.getFileUploadUrl({ templateId, filesHash: files.hash })).toMatchObject({ present: true, url: "" });

      const before = await json.getBuildStatus({ templateId, buildId });
      expect(before.build).toMatchObject({ buildId, templateId, status: BuildStatus.WAITING });

      // Watches opened before the start see every line from the first.
      const watchers = (await Promise.all([openWatch(grpc, { templateId, buildId }), openWatch(json, { templateId: name, buildId })])).map((w) => w.all);
      await binary.startBuild({
        templateId,
        buildId,
        base: { case: "fromTemplate", value: "base" },
        steps: [
          { type: "ENV", args: ["GREETING", "hello from ENV", "BUILT_BY", `connect-${nonce}`] },
          { type: "RUN", args: ['echo "$GREETING" > /home/user/greeting.txt && echo "run step says $BUILT_BY"'] },
          { type: "COPY", args: ["app", "/home/user/app"], filesHash: files.hash },
          { type: "RUN", args: ["cat /home/user/app/hello.txt && id -un"] },
        ],
      });
      const [viaGrpc, viaJson] = await Promise.all(watchers);

      for (const msgs of [viaGrpc, viaJson]) {
        // First the watch is on (status only), last the finished build.
        expect(msgs[0]).toMatchObject({ status: BuildStatus.WAITING, logsOffset: 0 });
        expect(msgs[0]!.logEntry).toBeUndefined();
        const last = msgs.at(-1)!;
        expect(last.status).toBe(BuildStatus.READY);
        expect(last.build).toMatchObject({ buildId, templateId, status: BuildStatus.READY });
        expect(last.build!.reason).toBeUndefined();
        expect(last.build!.rootfsBytes).toBeGreaterThan(0n);
        expect(msgs.filter((m) => m.build).length).toBe(1);
        // Statuses move forward only: waiting, building, ready.
        const statuses = msgs.map((m) => m.status);
        expect([...statuses].sort((a, b) => a - b)).toEqual(statuses);
        expect(statuses).toContain(BuildStatus.BUILDING);
        // Every line once, in order: logs_offset counts them.
        const entries = msgs.filter((m) => m.logEntry);
        expect(entries.map((m) => m.logsOffset)).toEqual(entries.map((_, i) => i + 1));
        expect(lines(msgs)).toContain(`run step says connect-${nonce}`);
        expect(lines(msgs)).toContain("hello from a COPY step");
        expect(lines(msgs)).toContain("user");
        expect(entries.find((m) => m.logEntry!.message === `run step says connect-${nonce}`)!.logEntry!.step).toBe("2");
        expect(lines(msgs).at(-1)).toBe("build ready");
      }
      expect(lines(viaJson)).toEqual(lines(viaGrpc));

      // GetBuildStatus pages the same log; a watch from an offset of a finished build gets the rest and the end.
      const all = lines(viaGrpc);
      const page = await grpc.getBuildStatus({ templateId, buildId, logsOffset: 2, limit: 3 });
      expect(page.build?.status).toBe(BuildStatus.READY);
      expect(page.logEntries.map((e) => e.message)).toEqual(all.slice(2, 5));
      const tail = await watchAll(binary, { templateId, buildId, logsOffset: all.length - 1 });
      expect(tail.map((m) => m.logEntry?.message ?? null)).toEqual([null, "build ready", null]);
      expect(tail.at(-1)!.build?.status).toBe(BuildStatus.READY);

      // The template, its build and tags.
      const got = await json.getTemplate({ templateId: name });
      expect(got.template).toMatchObject({ templateId, names: [name], buildId, buildStatus: BuildStatus.READY, builtIn: false, cpuCount: 1, memoryMb: 512, buildCount: 1 });
      expect(got.builds.map((b) => [b.buildId, b.status])).toEqual([[buildId, BuildStatus.READY]]);
      expect(got.tags.map((t) => [t.tag, t.buildId]).sort()).toEqual([
        ["stable", buildId],
        ["v1", buildId],
      ]);
      const listed = await binary.listTemplates({});
      expect(listed.templates[0]).toMatchObject({ templateId: "base", builtIn: true, public: true });
      expect(listed.templates.map((t) => t.templateId)).toContain(templateId);
      expect(await grpc.templateExists({ name: `${name}:v1` })).toMatchObject({ exists: true, templateId, public: false, snapshot: false });
      expect(await grpc.templateExists({ name: unique("nothing") })).toMatchObject({ exists: false, templateId: "" });
      expect((await json.updateTemplate({ templateId: name, public: true })).template).toMatchObject({ templateId, public: true });

      // A sandbox from it (by name:tag) through SandboxService has what the build made, as its user.
      const sandboxes = apiClient(cp.url, "grpc", { "x-api-key": cp.apiKey });
      const { sandbox } = await sandboxes.createSandbox({ templateId: `${name}:stable`, timeoutSeconds: 120 });
      expect(sandbox).toMatchObject({ templateId, alias: name, cpuCount: 1, memoryMb: 512 });
      const sbx = await Sandbox.connect(sandbox!.sandboxId, { apiKey: cp.apiKey, apiUrl: cp.url, sandboxUrl: cp.url });
      const r = await sbx.commands.run('echo "$GREETING/$BUILT_BY"; cat greeting.txt app/hello.txt app/sub/data.txt; pwd; id -un');
      expect(r.stdout).toBe(`hello from ENV/connect-${nonce}\nhello from ENV\nhello from a COPY step\n42\n/home/user\nuser\n`);
      await sandboxes.killSandbox({ sandboxId: sandbox!.sandboxId });

      // Tags: add one to the build `v1` names, list, remove.
      expect(await grpc.assignTags({ target: `${name}:v1`, tags: ["prod"] })).toMatchObject({ buildId, tags: ["prod"] });
      expect((await json.listTags({ templateId })).tags.map((t) => t.tag).sort()).toEqual(["prod", "stable", "v1"]);
      await binary.deleteTags({ name, tags: ["prod", "stable"] });
      expect((await json.listTags({ templateId: name })).tags.map((t) => t.tag)).toEqual(["v1"]);
      const missing = await rejection(binary.deleteTags({ name, tags: ["prod"] }));
      expect(missing.code).toBe(Code.NotFound);
      expect(missing.rawMessage).toContain("has no tag 'prod'");

      await grpc.deleteTemplate({ templateId: name });
      expect((await rejection(json.getTemplate({ templateId }))).code).toBe(Code.NotFound);
      expect(await json.templateExists({ name })).toMatchObject({ exists: false });
      expect(findTemplateImage(`@${buildId}`, dir)).toBeUndefined();
    },
    BUILD_MS,
  );

  it(
    "a failing RUN ends the build in ERROR with its step, the command's output, and only the error lines at level ERROR",
    async () => {
      const api = client("grpc");
      const name = unique("connect-fail");
      const { templateId, buildId } = await api.requestBuild({ name });
      // Lines arrive as they are written: when "about to fail" comes, its command is still sleeping, the build still BUILDING.
      let statusAtLine: BuildStatus | undefined;
      const watching = (
        await openWatch(client("connect-binary"), { templateId, buildId }, async (m) => {
          if (m.logEntry?.message === "about to fail") statusAtLine = (await api.getBuildStatus({ templateId, buildId })).build?.status;
        })
      ).all;
      await api.startBuild({
        templateId,
        buildId,
        // Every step runs, whatever an earlier run left in the step cache.
        force: true,
        steps: [
          { type: "RUN", args: ["echo first step ok"] },
          { type: "RUN", args: ["echo about to fail >&2; sleep 8; exit 3"] },
          { type: "RUN", args: ["echo never runs"] },
        ],
      });
      const msgs = await watching;
      expect(statusAtLine).toBe(BuildStatus.BUILDING);
      const last = msgs.at(-1)!;
      expect(last.status).toBe(BuildStatus.ERROR);
      expect(last.build?.reason).toMatchObject({ step: "2", message: expect.stringContaining("exited with 3") });
      expect(last.build!.reason!.message).toContain("about to fail");
      expect(last.build!.reason!.logEntries.map((e) => e.message)).toContain("about to fail");
      expect(lines(msgs)).toContain("first step ok");
      expect(lines(msgs)).not.toContain("never runs");

      const status = await client("connect-json").getBuildStatus({ templateId, buildId });
      expect(status.build).toMatchObject({ status: BuildStatus.ERROR, reason: { step: "2" } });
      const errors = await watchAll(client("connect-json"), { templateId, buildId, level: BuildLogLevel.ERROR });
      expect(errors.filter((m) => m.logEntry).map((m) => m.logEntry!.level)).toEqual([BuildLogLevel.ERROR]);
      expect(errors.filter((m) => m.logEntry)[0]!.logEntry!.message).toMatch(/^build failed: .*exited with 3/);
      // A failed build tags nothing: the template cannot be created from.
      const sandboxes = apiClient(cp.url, "connect-json", { "x-api-key": cp.apiKey });
      expect((await rejection(sandboxes.createSandbox({ templateId: name }))).code).toBe(Code.NotFound);
      await api.deleteTemplate({ templateId });
    },
    BUILD_MS,
  );
});

describe.skipIf(skip !== undefined).each(PROTOCOLS)(`TemplateService: bad input over %s${why}`, (protocol) => {
  it("is INVALID_ARGUMENT or NOT_FOUND with what to fix, and leaves the requested build startable", async () => {
    const api = client(protocol);
    const expectError = async (p: Promise<unknown>, code: Code, text: string | RegExp) => {
      const err = await rejection(p);
      expect([Code[err.code], err.rawMessage]).toEqual([Code[code], expect.stringMatching(text)]);
    };
    await expectError(api.requestBuild({ name: "" }), Code.InvalidArgument, /^name is required$/);
    await expectError(api.requestBuild({ name: "Bad Name!" }), Code.InvalidArgument, /invalid template name 'Bad Name!'/);
    await expectError(api.requestBuild({ name: "ok-name:bad tag" }), Code.InvalidArgument, /invalid tag/);
    await expectError(api.requestBuild({ name: "base" }), Code.InvalidArgument, /built on the server/);
    await expectError(api.requestBuild({ name: unique("cpu"), cpuCount: 0 }), Code.InvalidArgument, /cpu_count must be from 1 to 64, got 0/);
    await expectError(api.getTemplate({ templateId: "no-such-template" }), Code.NotFound, /template 'no-such-template' not found/);
    await expectError(api.deleteTemplate({ templateId: "no-such-template" }), Code.NotFound, /not found/);
    await expectError(api.deleteTemplate({ templateId: "base" }), Code.InvalidArgument, /built on the server/);
    await expectError(api.startBuild({ templateId: "no-such-template", buildId: "x" }), Code.NotFound, /template 'no-such-template' not found/);
    await expectError(api.listTemplates({ pageToken: "garbage" }), Code.InvalidArgument, /page_token/);
    await expectError(api.templateExists({ name: "Bad/Name/x" }), Code.InvalidArgument, /invalid template name/);
    await expectError(api.getFileUploadUrl({ templateId: "base", filesHash: "abc" }), Code.InvalidArgument, /invalid files hash/);

    const name = unique(`bad-${protocol}`);
    const { templateId, buildId } = await api.requestBuild({ name });
    const start = (o: Omit<MessageInitShape<typeof StartBuildRequestSchema>, "templateId" | "buildId" | "$typeName">) => api.startBuild({ templateId, buildId, ...o });
    await expectError(start({ steps: [{ type: "RUN", args: ["true"] }, { type: "FROB", args: [] }] }), Code.InvalidArgument, /^step 2: unknown step type 'FROB' \(known: RUN, COPY/);
    await expectError(start({ steps: [{ type: "RUN", args: [] }] }), Code.InvalidArgument, /^step 1 \(RUN\): expected \[command, user\?\]/);
    const hash = "a".repeat(64);
    await expectError(
      start({ steps: [{ type: "COPY", args: ["app", "/app"], filesHash: hash }] }),
      Code.InvalidArgument,
      new RegExp(`step 1 \\(COPY\\): the files of 'app' \\(hash ${hash}\\) were never uploaded`),
    );
    await expectError(start({ steps: [{ type: "COPY", args: ["app", "/app"] }] }), Code.InvalidArgument, /step 1 \(COPY\): no filesHash: upload the files first/);
    await expectError(start({ base: { case: "fromTemplate", value: "no-such-base" } }), Code.InvalidArgument, /base template 'no-such-base' not found/);
    await expectError(
      start({ base: { case: "fromTemplate", value: "base" }, fromImageRegistry: { credentials: { case: "login", value: { username: "u", password: "p" } } } }),
      Code.InvalidArgument,
      /from_image_registry is for from_image/,
    );
    await expectError(start({ fromImageRegistry: {}, base: { case: "fromImage", value: "debian:12" } }), Code.InvalidArgument, /without credentials/);
    await expectError(api.getBuildStatus({ templateId, buildId: "no-such-build" }), Code.NotFound, /build 'no-such-build' of template/);
    await expectError(api.getBuildStatus({ templateId, buildId, level: 99 as BuildLogLevel }), Code.InvalidArgument, /invalid level 99/);
    await expectError(watchAll(api, { templateId, buildId: "no-such-build" }), Code.NotFound, /build 'no-such-build' of template/);
    await expectError(api.assignTags({ target: name, tags: ["x"] }), Code.NotFound, /has no ready build to tag/);

    // Nothing was queued: the build still waits for a start, and the template goes without a trace.
    const status = await api.getBuildStatus({ templateId, buildId });
    expect(status.build?.status).toBe(BuildStatus.WAITING);
    expect(status.logEntries).toEqual([]);
    await api.deleteTemplate({ templateId: name });
    expect((await api.listTemplates({})).templates.map((t) => t.templateId)).not.toContain(templateId);
  });

  it("refuses a missing or wrong API key with UNAUTHENTICATED", async () => {
    for (const auth of [{}, { "x-api-key": `e2b_${"0".repeat(40)}` }] as Record<string, string>[]) {
      const bad = templateClient(cp.url, protocol, auth);
      expect((await rejection(bad.listTemplates({}))).code).toBe(Code.Unauthenticated);
      expect((await rejection(bad.requestBuild({ name: "x" }))).code).toBe(Code.Unauthenticated);
      expect((await rejection(watchAll(bad, { templateId: "base", buildId: "x" }))).code).toBe(Code.Unauthenticated);
    }
  });
});

describe.skipIf(skip !== undefined)(`TemplateService with buf curl (reflection, no --schema)${why}`, () => {
  it("lists the service and calls ListTemplates and TemplateExists", async () => {
    const services = await bufCurl(["--http2-prior-knowledge", "--protocol", "grpc", "--list-services", cp.url]);
    expect(services, services.stderr).toMatchObject({ code: 0 });
    expect(services.stdout.trim().split("\n")).toEqual(expect.arrayContaining(["locale2b.controlplane.v1.SandboxService", "locale2b.controlplane.v1.TemplateService"]));
    const url = (m: string) => `${cp.url}/locale2b.controlplane.v1.TemplateService/${m}`;
    const list = await bufCurl(["--http2-prior-knowledge", "--protocol", "grpc", "-H", `x-api-key: ${cp.apiKey}`, "-d", '{"limit":1}', url("ListTemplates")]);
    expect(list, list.stderr).toMatchObject({ code: 0 });
    expect(JSON.parse(list.stdout)).toMatchObject({ templates: [{ templateId: "base", names: ["base"], public: true, builtIn: true, buildStatus: "BUILD_STATUS_READY" }] });
    // The Connect protocol (buf curl's default) over h2c: reflection is a bidi stream, so HTTP/2.
    const exists = await bufCurl(["--http2-prior-knowledge", "-H", `x-api-key: ${cp.apiKey}`, "-d", '{"name":"base"}', url("TemplateExists")]);
    expect(exists, exists.stderr).toMatchObject({ code: 0 });
    expect(JSON.parse(exists.stdout)).toEqual({ exists: true, templateId: "base", public: true });
  });
});
