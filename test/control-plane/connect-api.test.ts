// The Connect API (locale2b.controlplane.v1.SandboxService) against a real
// control plane on the process runtime, through the generated TS client
// over Connect JSON and gRPC, plus reflection with `buf curl`.
import { create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, type HandlerContext } from "@connectrpc/connect";
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  SandboxEventType,
  SandboxState,
  TimeoutAction,
  WatchSandboxEventsRequestSchema,
  type WatchSandboxEventsResponse,
} from "../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { watchEvents } from "../../control-plane/api/connect/watch.js";
import { LifecycleBus } from "../../control-plane/manager/events.js";
import type { SandboxRecord } from "../../control-plane/domain/sandbox.js";
import { apiClient, bufCurl, rejection, watch, type Protocol, type SandboxClient } from "../helpers/connect-api.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";

let cp: TestControlPlane;
beforeAll(async () => {
  cp = await startTestControlPlane();
});
afterAll(async () => {
  await cp?.close();
});

const tag = () => randomBytes(4).toString("hex");
const types = (events: WatchSandboxEventsResponse[]) => events.map((e) => SandboxEventType[e.type]);

describe.each<Protocol>(["connect-json", "grpc"])("lifecycle over %s", (protocol) => {
  let api: SandboxClient;
  beforeAll(() => {
    api = apiClient(cp.url, protocol, { "x-api-key": cp.apiKey });
  });

  it("create, get, list, pause (twice), resume, set timeout, kill", async () => {
    const suite = tag();
    const before = Date.now();
    const { sandbox } = await api.createSandbox({ templateId: "base", timeoutSeconds: 120, metadata: { suite, protocol } });
    expect(sandbox).toMatchObject({ templateId: "base", state: SandboxState.RUNNING, metadata: { suite, protocol }, runtime: "process" });
    const id = sandbox!.sandboxId;
    expect(id).toMatch(/^[a-z0-9]+$/);
    expect(sandbox!.envdAccessToken).not.toBe("");
    expect(sandbox!.onTimeout).toBe(TimeoutAction.KILL);
    expect(timestampMs(sandbox!.endAt!)).toBeGreaterThanOrEqual(before + 120_000);

    const got = await api.getSandbox({ sandboxId: id });
    expect(got.sandbox).toMatchObject({ sandboxId: id, state: SandboxState.RUNNING, metadata: { suite } });

    const listed = await api.listSandboxes({ metadata: { suite } });
    expect(listed.sandboxes.map((s) => s.sandboxId)).toEqual([id]);
    expect(listed.nextPageToken).toBe("");
    expect((await api.listSandboxes({ metadata: { suite }, states: [SandboxState.PAUSED] })).sandboxes).toEqual([]);
    expect((await api.listSandboxes({ metadata: { suite: "no-such-suite" } })).sandboxes).toEqual([]);

    await api.pauseSandbox({ sandboxId: id });
    expect((await api.getSandbox({ sandboxId: id })).sandbox?.state).toBe(SandboxState.PAUSED);
    const again = await rejection(api.pauseSandbox({ sandboxId: id }));
    expect(again.code).toBe(Code.FailedPrecondition);
    expect(again.rawMessage).toContain("already paused");
    const paused = await api.listSandboxes({ metadata: { suite }, states: [SandboxState.PAUSED] });
    expect(paused.sandboxes.map((s) => s.sandboxId)).toEqual([id]);
    expect((await api.listSandboxes({ metadata: { suite }, states: [SandboxState.RUNNING] })).sandboxes).toEqual([]);

    const resumed = await api.resumeSandbox({ sandboxId: id, timeoutSeconds: 60 });
    expect(resumed.resumed).toBe(true);
    expect(resumed.sandbox?.state).toBe(SandboxState.RUNNING);
    // E2B connect on a running sandbox: not resumed, the timeout is never shortened.
    const connected = await api.resumeSandbox({ sandboxId: id, timeoutSeconds: 1 });
    expect(connected.resumed).toBe(false);
    expect(timestampMs(connected.sandbox!.endAt!)).toBe(timestampMs(resumed.sandbox!.endAt!));

    const t0 = Date.now();
    const { endAt } = await api.setSandboxTimeout({ sandboxId: id, timeoutSeconds: 30 });
    expect(timestampMs(endAt!)).toBeGreaterThanOrEqual(t0 + 30_000);
    expect(timestampMs(endAt!)).toBeLessThan(timestampMs(resumed.sandbox!.endAt!));
    expect(timestampMs((await api.getSandbox({ sandboxId: id })).sandbox!.endAt!)).toBe(timestampMs(endAt!));

    await api.killSandbox({ sandboxId: id });
    expect((await rejection(api.getSandbox({ sandboxId: id }))).code).toBe(Code.NotFound);
    expect((await rejection(api.killSandbox({ sandboxId: id }))).code).toBe(Code.NotFound);
    expect((await rejection(api.pauseSandbox({ sandboxId: id }))).code).toBe(Code.NotFound);
    const killed = await api.listSandboxes({ metadata: { suite }, states: [SandboxState.KILLED] });
    expect(killed.sandboxes.map((s) => [s.sandboxId, s.endReason])).toEqual([[id, "killed"]]);
  });

  it("refuses a missing or wrong API key with Unauthenticated, on every RPC", async () => {
    const auths: Record<string, string>[] = [{}, { "x-api-key": `e2b_${"0".repeat(40)}` }, { authorization: "Bearer nope" }];
    for (const auth of auths) {
      const bad = apiClient(cp.url, protocol, auth);
      for (const call of [
        bad.listSandboxes({}),
        bad.getSandbox({ sandboxId: "x" }),
        bad.createSandbox({ templateId: "base" }),
        bad.killSandbox({ sandboxId: "x" }),
      ]) {
        const err = await rejection(call);
        expect(err.code).toBe(Code.Unauthenticated);
        expect(err.rawMessage).toContain("X-API-KEY");
      }
      const stream = bad.watchSandboxEvents({});
      const err = await rejection((async () => {
        for await (const _ of stream) break;
      })());
      expect(err.code).toBe(Code.Unauthenticated);
    }
    const bearer = apiClient(cp.url, protocol, { authorization: `Bearer ${cp.apiKey}` });
    await expect(bearer.listSandboxes({})).resolves.toBeDefined();
  });

  it("refuses bad input", async () => {
    const empty = await rejection(api.createSandbox({ templateId: "" }));
    expect(empty.code).toBe(Code.InvalidArgument);
    expect(empty.rawMessage).toContain("template_id");
    const unknown = await rejection(api.createSandbox({ templateId: "no-such-template" }));
    expect(unknown.code).toBe(Code.NotFound);
    expect(unknown.rawMessage).toContain("no-such-template");
    const long = await rejection(api.createSandbox({ templateId: "base", timeoutSeconds: 24 * 3600 + 1 }));
    expect(long.code).toBe(Code.InvalidArgument);
    expect(long.rawMessage).toMatch(/timeout/i);
    expect((await rejection(api.createSandbox({ templateId: "base", memoryMb: 0 }))).code).toBe(Code.InvalidArgument);
    expect((await rejection(api.getSandbox({ sandboxId: "" }))).code).toBe(Code.InvalidArgument);
    expect((await rejection(api.getSandbox({ sandboxId: "doesnotexist" }))).code).toBe(Code.NotFound);
    expect((await rejection(api.listSandboxes({ states: [SandboxState.UNSPECIFIED] }))).code).toBe(Code.InvalidArgument);
    expect((await rejection(api.listSandboxes({ pageToken: "garbage" }))).code).toBe(Code.InvalidArgument);
    // 0 is "end now" (as E2B's REST API takes it): valid, so an unknown sandbox is not_found; past the limit is invalid.
    expect((await rejection(api.setSandboxTimeout({ sandboxId: "doesnotexist", timeoutSeconds: 0 }))).code).toBe(Code.NotFound);
    expect((await rejection(api.setSandboxTimeout({ sandboxId: "doesnotexist", timeoutSeconds: 30 * 24 * 3600 }))).code).toBe(
      Code.InvalidArgument,
    );
    expect((await rejection(api.resumeSandbox({ sandboxId: "doesnotexist" }))).code).toBe(Code.NotFound);
  });
});

describe("malformed requests", () => {
  const post = (path: string, body: Uint8Array | string, type: string) =>
    fetch(cp.url + path, { method: "POST", headers: { "content-type": type, "x-api-key": cp.apiKey }, body });

  it("malformed protobuf → invalid_argument (400), as connect-go answers; a wrong method → 405 with Allow", async () => {
    const res = await post("/locale2b.controlplane.v1.SandboxService/GetSandbox", new Uint8Array([0x0a, 0xff, 0xff]), "application/proto");
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "invalid_argument", message: expect.stringContaining("GetSandboxRequest") });
    const get = await fetch(`${cp.url}/locale2b.controlplane.v1.SandboxService/GetSandbox`, { headers: { "x-api-key": cp.apiKey } });
    expect(get.status).toBe(405);
    expect(get.headers.get("allow")).toBe("POST");
  });

  it("a NUL byte in an id is refused or not found, never internal", async () => {
    const api = apiClient(cp.url, "connect-json", { "x-api-key": cp.apiKey });
    expect((await rejection(api.createSandbox({ templateId: "base\u0000x" }))).code).toBeOneOf([Code.InvalidArgument, Code.NotFound]);
    expect((await rejection(api.getSandbox({ sandboxId: "a\u0000b" }))).code).toBeOneOf([Code.InvalidArgument, Code.NotFound]);
  });
});

describe("WatchSandboxEvents", () => {
  let api: SandboxClient;
  beforeAll(() => {
    api = apiClient(cp.url, "grpc", { "x-api-key": cp.apiKey });
  });

  // First: no other watch has been opened yet, so the listener count is settled.
  it("unsubscribes when the client cancels", async () => {
    const bus = cp.manager.events as unknown as { emitter: { listenerCount(e: string): number } };
    const baseline = bus.emitter.listenerCount("event");
    const w = await watch(api, {});
    expect(bus.emitter.listenerCount("event")).toBe(baseline + 1);
    w.close();
    await expect.poll(() => bus.emitter.listenerCount("event"), { timeout: 20_000 }).toBe(baseline);
  });

  it("filtered by metadata: created, paused, resumed, killed in order, nothing of other sandboxes", async () => {
    const suite = tag();
    const w = await watch(api, { metadata: { suite } });
    const other = await api.createSandbox({ templateId: "base", metadata: { suite: `${suite}-other` } });
    const { sandbox } = await api.createSandbox({ templateId: "base", metadata: { suite, role: "watched" } });
    const id = sandbox!.sandboxId;
    await api.pauseSandbox({ sandboxId: id });
    await api.resumeSandbox({ sandboxId: id });
    await api.killSandbox({ sandboxId: id });
    const events = await w.until((e) => e.type === SandboxEventType.KILLED);
    w.close();
    await api.killSandbox({ sandboxId: other.sandbox!.sandboxId });
    expect(types(events)).toEqual(["CREATED", "PAUSED", "RESUMED", "KILLED"]);
    expect(events.every((e) => e.sandbox?.sandboxId === id && e.sandbox.metadata.role === "watched")).toBe(true);
    expect(events.map((e) => e.sandbox?.state)).toEqual([
      SandboxState.RUNNING,
      SandboxState.PAUSED,
      SandboxState.RUNNING,
      SandboxState.KILLED,
    ]);
    const times = events.map((e) => timestampMs(e.time!));
    expect([...times].sort((a, b) => a - b)).toEqual(times);
  });

  it("filtered by sandbox id, over Connect JSON too", async () => {
    const json = apiClient(cp.url, "connect-json", { "x-api-key": cp.apiKey });
    const { sandbox } = await api.createSandbox({ templateId: "base" });
    const other = await api.createSandbox({ templateId: "base" });
    const id = sandbox!.sandboxId;
    const w = await watch(json, { sandboxId: id });
    await api.pauseSandbox({ sandboxId: other.sandbox!.sandboxId });
    await api.pauseSandbox({ sandboxId: id });
    await api.resumeSandbox({ sandboxId: id });
    await api.killSandbox({ sandboxId: other.sandbox!.sandboxId });
    await api.killSandbox({ sandboxId: id });
    const events = await w.until((e) => e.type === SandboxEventType.KILLED);
    w.close();
    expect(types(events)).toEqual(["PAUSED", "RESUMED", "KILLED"]);
    expect(new Set(events.map((e) => e.sandbox?.sandboxId))).toEqual(new Set([id]));
    expect(events.at(-1)?.sandbox?.endReason).toBe("killed");
  });

  it("a sandbox with a 1-s timeout: created, timed_out, then killed with reason timeout", async () => {
    const suite = tag();
    const w = await watch(api, { metadata: { suite } });
    await api.createSandbox({ templateId: "base", timeoutSeconds: 1, metadata: { suite } });
    const events = await w.until((e) => e.type === SandboxEventType.KILLED);
    w.close();
    expect(types(events)).toEqual(["CREATED", "TIMED_OUT", "KILLED"]);
    expect(events[2]!.sandbox?.endReason).toBe("timeout");
  });

});

describe("paging", () => {
  it("walks every page with next_page_token", async () => {
    const api = apiClient(cp.url, "connect-json", { "x-api-key": cp.apiKey });
    const suite = tag();
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await api.createSandbox({ templateId: "base", metadata: { suite } })).sandbox!.sandboxId);
    const seen: string[] = [];
    let pageToken = "";
    let pages = 0;
    do {
      const res = await api.listSandboxes({ metadata: { suite }, limit: 2, pageToken });
      expect(res.sandboxes.length).toBeLessThanOrEqual(2);
      seen.push(...res.sandboxes.map((s) => s.sandboxId));
      pageToken = res.nextPageToken;
      pages++;
    } while (pageToken);
    expect(pages).toBe(2);
    expect(seen.sort()).toEqual([...ids].sort());
    for (const id of ids) await api.killSandbox({ sandboxId: id });
  });
});

describe("capacity", () => {
  it("is ResourceExhausted with what to do and a retry-after", async () => {
    const full = await startTestControlPlane({ limits: { maxSandboxes: 0 } });
    try {
      const api = apiClient(full.url, "connect-json", { "x-api-key": full.apiKey });
      const err = await rejection(api.createSandbox({ templateId: "base" }));
      expect(err.code).toBe(Code.ResourceExhausted);
      expect(err.rawMessage).toContain("--max-sandboxes");
      expect(err.metadata.get("retry-after")).toMatch(/^\d+$/);
    } finally {
      await full.close();
    }
  });

  it("counts vCPUs against --cpu-budget: the create that would pass it is ResourceExhausted, a smaller one still fits", async () => {
    const cp = await startTestControlPlane({ limits: { cpuBudget: 5 } });
    try {
      const api = apiClient(cp.url, "connect-json", { "x-api-key": cp.apiKey });
      const ids = [(await api.createSandbox({ templateId: "base", cpuCount: 2 })).sandbox!.sandboxId, (await api.createSandbox({ templateId: "base", cpuCount: 2 })).sandbox!.sandboxId];
      const err = await rejection(api.createSandbox({ templateId: "base", cpuCount: 2 }));
      expect(err.code).toBe(Code.ResourceExhausted);
      expect(err.rawMessage).toContain("CPU budget exhausted: 4 of 5 vCPUs given to sandboxes and 2 requested");
      expect(err.rawMessage).toContain("--cpu-budget");
      ids.push((await api.createSandbox({ templateId: "base", cpuCount: 1 })).sandbox!.sandboxId);
      // A killed sandbox gives its vCPUs back.
      await api.killSandbox({ sandboxId: ids[0]! });
      ids.push((await api.createSandbox({ templateId: "base", cpuCount: 2 })).sandbox!.sandboxId);
      for (const id of ids.slice(1)) await api.killSandbox({ sandboxId: id });
    } finally {
      await cp.close();
    }
  });
});

describe("reflection with buf curl", () => {
  it("--list-services shows the SandboxService", async () => {
    const run = await bufCurl(["--http2-prior-knowledge", "--protocol", "grpc", "--list-services", cp.url]);
    expect(run, run.stderr).toMatchObject({ code: 0 });
    expect(run.stdout.trim().split("\n")).toContain("locale2b.controlplane.v1.SandboxService");
  });

  it("calls ListSandboxes with an API key (and is refused without)", async () => {
    const { sandbox } = await apiClient(cp.url, "grpc", { "x-api-key": cp.apiKey }).createSandbox({
      templateId: "base",
      metadata: { via: "buf-curl" },
    });
    const url = `${cp.url}/locale2b.controlplane.v1.SandboxService/ListSandboxes`;
    const body = JSON.stringify({ metadata: { via: "buf-curl" } });
    const run = await bufCurl(["--http2-prior-knowledge", "--protocol", "grpc", "-H", `x-api-key: ${cp.apiKey}`, "-d", body, url]);
    expect(run, run.stderr).toMatchObject({ code: 0 });
    const res = JSON.parse(run.stdout) as { sandboxes: { sandboxId: string; state: string }[] };
    expect(res.sandboxes).toEqual([expect.objectContaining({ sandboxId: sandbox!.sandboxId, state: "SANDBOX_STATE_RUNNING" })]);

    const refused = await bufCurl(["--http2-prior-knowledge", "--protocol", "grpc", "-d", "{}", url]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/unauthenticated/i);
  });
});

describe("the watch queue (unit)", () => {
  const record = (id: string) =>
    ({ id, templateId: "base", state: "running", metadata: {}, startedAt: 0, endAt: 0, onTimeout: "kill" }) as unknown as SandboxRecord;

  it("delivers in order, then ends the stream with ResourceExhausted when the client falls too far behind", async () => {
    const bus = new LifecycleBus();
    const ac = new AbortController();
    const stream = watchEvents(bus, create(WatchSandboxEventsRequestSchema, {}), { signal: ac.signal } as HandlerContext, 3);
    expect((await stream.next()).value?.type).toBe(SandboxEventType.SUBSCRIBED);
    for (const id of ["a", "b"]) bus.emit({ type: "created", sandbox: record(id), time: 1 });
    expect((await stream.next()).value?.sandbox?.sandboxId).toBe("a");
    expect((await stream.next()).value?.sandbox?.sandboxId).toBe("b");
    for (const id of ["c", "d", "e", "f"]) bus.emit({ type: "killed", sandbox: record(id), time: 2 });
    const err = await rejection(stream.next());
    expect(err.code).toBe(Code.ResourceExhausted);
    ac.abort();
  });

  it("returns when the client cancels, and unsubscribes", async () => {
    const bus = new LifecycleBus();
    const ac = new AbortController();
    const stream = watchEvents(bus, create(WatchSandboxEventsRequestSchema, { sandboxId: "x" }), { signal: ac.signal } as HandlerContext);
    await stream.next();
    const pending = stream.next();
    ac.abort();
    expect((await pending).done).toBe(true);
    let delivered = 0;
    bus.subscribe({}, () => delivered++);
    bus.emit({ type: "created", sandbox: record("x"), time: 1 });
    expect(delivered).toBe(1);
    expect((bus as unknown as { emitter: { listenerCount(e: string): number } }).emitter.listenerCount("event")).toBe(1);
  });
});
