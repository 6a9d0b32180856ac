// WatchBuild: a build's log from an offset and then as it is written, its
// status as it changes, and at the end the finished build. The build log's
// subscribe hook wakes the stream when a line is written; the build's status
// is read again on every wake and at least every RECHECK_MS, because a status
// change writes no line of its own (waiting → building) and a template
// deleted under the watch writes none either.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { WatchBuildRequest, WatchBuildResponseSchema } from "../../../gen/ts/locale2b/controlplane/v1/template_pb.js";
import { ControlPlaneError } from "../../domain/errors.js";
import type { BuildStatus } from "../../domain/template.js";
import { levelAtLeast } from "../../templates/build-log.js";
import type { TemplateService } from "../../templates/template-service.js";
import { required } from "./convert.js";
import { buildToProto, finished, levelFromProto, logEntryToProto, statusToProto } from "./template-convert.js";

type Out = MessageInitShape<typeof WatchBuildResponseSchema>;

/** How often the build's status is read when no log line wakes the stream. */
export const RECHECK_MS = 1000;

/** Resolves on `wake`, after `ms`, or when `signal` fires, whichever is first. */
function wait(woken: Promise<void>, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    void woken.then(done);
  });
}

export async function* watchBuild(service: TemplateService, req: WatchBuildRequest, signal: AbortSignal, recheckMs = RECHECK_MS): AsyncGenerator<Out> {
  const ref = required(req.templateId, "template_id");
  const buildId = required(req.buildId, "build_id");
  const level = levelFromProto(req.level);
  // NOT_FOUND before anything is sent.
  const first = (await service.build(ref, buildId)).build;
  const log = service.logOf(first);
  let wake = () => {};
  const unsubscribe = log.subscribe(() => wake());
  const statusNow = async (): Promise<BuildStatus> => {
    try {
      return (await service.build(ref, buildId)).build.status;
    } catch (err) {
      if (err instanceof ControlPlaneError && err.kind === "not_found") {
        throw new ConnectError(`build '${buildId}' of template '${ref}' is gone: the template was deleted during the watch`, Code.NotFound);
      }
      throw err;
    }
  };
  let offset = req.logsOffset;
  /** The log's lines from `offset` on, at the level asked for (each message says where the next line starts). */
  function* drain(status: BuildStatus): Generator<Out> {
    for (let entries = log.all(); offset < entries.length; entries = log.all()) {
      const entry = entries[offset++]!;
      if (levelAtLeast(entry, level)) yield { status: statusToProto(status), logEntry: logEntryToProto(entry), logsOffset: offset };
    }
  }
  try {
    let status = first.status;
    yield { status: statusToProto(status), logsOffset: offset };
    for (;;) {
      // Armed before the log is read, so a line written after the read still wakes the next wait.
      const woken = new Promise<void>((resolve) => (wake = resolve));
      // The status first: the lines read after it are labelled with it (the last, "build ready" or why it failed, with the final one).
      const now = await statusNow();
      if (now !== status && !finished(now)) yield { status: statusToProto(now), logsOffset: offset };
      status = now;
      yield* drain(status);
      if (finished(status)) {
        const { build, reasonEntries } = await service.status(ref, buildId, { offset: 0, limit: 0 });
        yield { status: statusToProto(status), logsOffset: offset, build: buildToProto(build, reasonEntries) };
        return;
      }
      await wait(woken, recheckMs, signal);
      if (signal.aborted) return;
    }
  } finally {
    unsubscribe();
  }
}
