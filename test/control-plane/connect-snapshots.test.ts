// The Connect API's snapshot RPCs (CreateSnapshot, ListSnapshots,
// DeleteSnapshot, ForkSandbox, and CreateSandbox from a snapshot) through
// the generated TS client over Connect JSON and gRPC, and `buf curl`, against
// a real control plane on the process runtime. Needs root (sandbox mode).
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { apiClient, bufCurl, rejection, type Protocol } from "../helpers/connect-api.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;

let cp: TestControlPlane;
beforeAll(async () => {
  if (!skip) cp = await startTestControlPlane({ runtime });
});
afterAll(async () => {
  await cp?.close();
});

describe.skipIf(skip !== undefined).each<Protocol>(["connect-json", "grpc"])(`snapshots over %s${skip ? ` (skipped: ${skip})` : ""}`, (protocol) => {
  it("create, list (paged), create a sandbox from one, fork, delete; bad input", async () => {
    const api = apiClient(cp.url, protocol, { "x-api-key": cp.apiKey });
    const { sandbox: src } = await api.createSandbox({ templateId: "base", timeoutSeconds: 600, metadata: { who: "src" }, memoryMb: 384 });
    const name = `connect-${protocol.replace(/[^a-z]/g, "")}-${process.pid}`;
    const { snapshot: a } = await api.createSnapshot({ sandboxId: src!.sandboxId, name });
    expect(a).toMatchObject({ snapshotId: `local/${name}:default`, names: [`local/${name}:default`], name, tag: "default", kind: "filesystem", sandboxId: src!.sandboxId, runtime: "process" });
    expect(a!.sizeBytes).toBeGreaterThan(0n);
    const { snapshot: b } = await api.createSnapshot({ sandboxId: src!.sandboxId, memory: false });
    const first = await api.listSnapshots({ sandboxId: src!.sandboxId, limit: 1 });
    expect(first.snapshots.map((s) => s.snapshotId)).toEqual([b!.snapshotId]);
    const second = await api.listSnapshots({ sandboxId: src!.sandboxId, limit: 1, pageToken: first.nextPageToken });
    expect(second.snapshots.map((s) => s.snapshotId)).toEqual([a!.snapshotId]);
    expect(second.nextPageToken).toBe("");

    const { sandbox: made } = await api.createSandbox({ templateId: name, timeoutSeconds: 600 });
    expect(made!.sandboxId).not.toBe(src!.sandboxId);
    expect(made!.templateId).toBe("base");
    // The snapshot's shape (its source's memory and disk), unless the create asks for another.
    expect(made).toMatchObject({ memoryMb: 384, diskSizeMb: src!.diskSizeMb, cpuCount: src!.cpuCount });
    const { sandbox: bigger } = await api.createSandbox({ templateId: a!.snapshotId, timeoutSeconds: 60, memoryMb: 512 });
    expect(bigger!.memoryMb).toBe(512);
    await api.killSandbox({ sandboxId: bigger!.sandboxId });
    const { results } = await api.forkSandbox({ sandboxId: src!.sandboxId, count: 2, timeoutSeconds: 300 });
    expect(results.length).toBe(2);
    const ids = results.map((r) => r.sandbox?.sandboxId);
    expect(new Set([src!.sandboxId, made!.sandboxId, ...ids]).size).toBe(4);
    expect(results.every((r) => r.errorCode === "" && r.sandbox?.metadata.who === "src" && r.sandbox.memoryMb === 384)).toBe(true);

    expect((await rejection(api.createSnapshot({ sandboxId: src!.sandboxId, memory: true }))).code).toBe(Code.InvalidArgument);
    expect((await rejection(api.createSnapshot({ sandboxId: "nosuch" }))).code).toBe(Code.NotFound);
    expect((await rejection(api.forkSandbox({ sandboxId: src!.sandboxId, count: 101 }))).code).toBe(Code.InvalidArgument);
    expect((await rejection(api.listSnapshots({ pageToken: "zzz" }))).code).toBe(Code.InvalidArgument);
    expect((await rejection(api.deleteSnapshot({ snapshotId: "nosuch" }))).code).toBe(Code.NotFound);

    await api.deleteSnapshot({ snapshotId: a!.snapshotId });
    await api.deleteSnapshot({ snapshotId: b!.snapshotId });
    expect((await api.listSnapshots({ sandboxId: src!.sandboxId })).snapshots).toEqual([]);
    for (const id of [src!.sandboxId, made!.sandboxId, ...ids]) await api.killSandbox({ sandboxId: id! });
  });
});

describe.skipIf(skip !== undefined)("snapshots with buf curl (reflection)", () => {
  it("ListSnapshots answers through reflection", async () => {
    const r = await bufCurl(["--protocol", "grpc", "--http2-prior-knowledge", "-H", `x-api-key: ${cp.apiKey}`, "-d", "{}", `${cp.url}/locale2b.controlplane.v1.SandboxService/ListSnapshots`]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({});
  });
});
