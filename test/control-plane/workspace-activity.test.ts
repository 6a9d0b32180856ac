// Events, the audit log and metrics history through every API: the workspace
// API, the E2B SDK (REST + envd through the proxy) and the Connect API; on
// one box's activity.db (SQLite) and on the fleet's Postgres (serve
// --database-url: a real server, started by the test).
import { Sandbox } from "e2b";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import net from "node:net";
import { Writable } from "node:stream";
import { join } from "node:path";
import { promisify } from "node:util";
import { Code } from "@connectrpc/connect";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxEventType, type WatchSandboxEventsResponse } from "../../gen/ts/locale2b/controlplane/v1/sandbox_pb.js";
import { apiClient, watch } from "../helpers/connect-api.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { ROOT } from "../helpers/process-runtime.js";
import { setEnv } from "../helpers/sdk.js";
import { postgresMissing, startPostgres, type TestPostgres } from "../helpers/postgres.js";
import { openSse, workspaceClient } from "../helpers/workspace.js";

const pgMissing = postgresMissing();
if (pgMissing) console.warn(`workspace-activity.test.ts: skipping Postgres: ${pgMissing}`);

const SECRET = `s3cr3t-${randomBytes(6).toString("hex")}`;

for (const kind of [
  { name: "sqlite", skip: false },
  { name: "postgres", skip: pgMissing !== undefined },
]) {
  describe.skipIf(kind.skip)(`activity through every API: ${kind.name}`, () => {
    let logText = "";
    let cp: TestControlPlane;
    let call: ReturnType<typeof workspaceClient>;
    let restoreEnv: () => void;
    let sandboxId: string;
    let pg: TestPostgres | undefined;

    beforeAll(async () => {
      if (kind.name === "postgres") pg = await startPostgres();
      const sink = new Writable({
        write(chunk, _enc, cb) {
          logText += chunk.toString();
          cb();
        },
      });
      cp = await startTestControlPlane({
        ...(pg ? { databaseUrl: await pg.database(), nodeName: "activity-test" } : {}),
        activity: { metricsIntervalMs: 250, subscriberQueueLimit: 50 },
        log: pino({ level: "debug" }, sink),
      });
      call = workspaceClient(cp.workspaceUrl, cp.apiKey);
      restoreEnv = setEnv(cp.sdkEnv);
      const created = await call("POST", "/sandboxes", { workspace_id: `act-${randomBytes(4).toString("hex")}`, secret_env_vars: { DEPLOY_SECRET: SECRET } });
      expect(created.status).toBe(201);
      sandboxId = created.body.sandbox_id as string;
    });

    afterAll(async () => {
      restoreEnv?.();
      await cp?.close();
      await pg?.stop();
    });

    const headers = () => ({ "x-api-key": cp.apiKey });

    describe("events through every API", () => {
      it("a workspace exec and an E2B SDK commands.run produce the same exec events, on the SSE stream and the Connect stream", async () => {
        const sse = await openSse(`${cp.workspaceUrl}/events/stream?sandbox_id=${sandboxId}&event_type=exec.*`, headers());
        await sse.next((e) => e.event === "subscribed");
        const watch = apiClient(cp.url, "connect-json", headers()).watchSandboxEvents({ sandboxId, eventTypes: ["exec.*"] })[Symbol.asyncIterator]();
        expect((await watch.next()).value?.type).toBe(SandboxEventType.SUBSCRIBED);

        const ws = await call("POST", `/sandboxes/${sandboxId}/exec`, { command: "echo from-workspace" });
        expect(ws.body).toMatchObject({ success: true, stdout: "from-workspace\n" });
        const sbx = await Sandbox.connect(sandboxId);
        const r = await sbx.commands.run("echo from-sdk; exit 0");
        expect(r.stdout).toBe("from-sdk\n");

        const seen = [await sse.next(), await sse.next(), await sse.next(), await sse.next()];
        sse.close();
        expect(seen.map((e) => [e.event, e.data.command])).toEqual([
          ["exec.started", "echo from-workspace"],
          ["exec.completed", "echo from-workspace"],
          ["exec.started", "echo from-sdk; exit 0"],
          ["exec.completed", "echo from-sdk; exit 0"],
        ]);
        for (const e of seen) {
          expect(e.id).toBe(String(e.data.id));
          expect(e.data).toMatchObject({ event_type: e.event, sandbox_id: sandboxId, timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
          expect(typeof e.data.pid).toBe("number");
        }
        expect(seen[0]!.data.exec_id).toBe(ws.body.exec_id);
        expect(seen[2]!.data).not.toHaveProperty("exec_id");
        for (const done of [seen[1]!, seen[3]!]) {
          expect(done.data.exit_code).toBe(0);
          expect(typeof done.data.duration_ms).toBe("number");
        }
        // The Connect stream carried the same events, with the same ids.
        const connect: WatchSandboxEventsResponse[] = [];
        while (connect.length < 4) connect.push((await watch.next()).value!);
        await watch.return?.();
        expect(connect.map((e) => Number(e.id))).toEqual(seen.map((e) => Number(e.data.id)));
        expect(connect.map((e) => e.type)).toEqual([
          SandboxEventType.EXEC_STARTED,
          SandboxEventType.EXEC_COMPLETED,
          SandboxEventType.EXEC_STARTED,
          SandboxEventType.EXEC_COMPLETED,
        ]);
        expect(connect[2]!.activity).toMatchObject({ command: "echo from-sdk; exit 0", user: "user" });
        expect(connect[3]!.activity?.exitCode).toBe(0);
      });

      it("a failing command is exec.failed with its exit code, through either API", async () => {
        const sse = await openSse(`${cp.workspaceUrl}/events/stream?sandbox_id=${sandboxId}&event_type=exec.failed`, headers());
        await sse.next((e) => e.event === "subscribed");
        await call("POST", `/sandboxes/${sandboxId}/exec`, { command: "exit 4" });
        const sbx = await Sandbox.connect(sandboxId);
        await expect(sbx.commands.run("exit 5")).rejects.toThrow();
        const a = await sse.next();
        const b = await sse.next();
        sse.close();
        expect([a.data.exit_code, b.data.exit_code]).toEqual([4, 5]);
        expect(a.data.error).toBe("exit status 4");
      });

      it("file transfers are file.written / file.read events with path and bytes, through either API", async () => {
        const sse = await openSse(`${cp.workspaceUrl}/events/stream?sandbox_id=${sandboxId}&event_type=file.*`, headers());
        await sse.next((e) => e.event === "subscribed");
        await call("POST", `/sandboxes/${sandboxId}/files/write`, { path: "ev/a.txt", content: "12345" });
        const sbx = await Sandbox.connect(sandboxId);
        await sbx.files.write("/workspace/ev/b.txt", "1234567");
        expect(await sbx.files.read("/workspace/ev/a.txt")).toBe("12345");
        expect((await call("GET", `/sandboxes/${sandboxId}/files/read?path=ev/b.txt`)).body.content).toBe("1234567");
        const got = [await sse.next(), await sse.next(), await sse.next(), await sse.next()];
        sse.close();
        expect(got.map((e) => [e.event, e.data.path, e.data.bytes])).toEqual([
          ["file.written", "/workspace/ev/a.txt", 5],
          ["file.written", "/workspace/ev/b.txt", 7],
          ["file.read", "/workspace/ev/a.txt", 5],
          ["file.read", "/workspace/ev/b.txt", 7],
        ]);
      });

      it("lifecycle events, and a reconnect with Last-Event-ID replays what it missed, with no gap and no duplicate", async () => {
        const first = await openSse(`${cp.workspaceUrl}/events/stream?event_type=sandbox.*`, headers());
        const hello = await first.next((e) => e.event === "subscribed");
        first.close();
        const sbx = await Sandbox.create("base");
        await sbx.pause();
        await Sandbox.connect(sbx.sandboxId);
        await sbx.kill();
        const again = await openSse(`${cp.workspaceUrl}/events/stream?event_type=sandbox.*&sandbox_id=${sbx.sandboxId}`, {
          ...headers(),
          "last-event-id": String(hello.data.last_id),
        });
        await again.next((e) => e.event === "subscribed");
        const replay = [await again.next(), await again.next(), await again.next(), await again.next()];
        again.close();
        expect(replay.map((e) => e.event)).toEqual(["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.destroyed"]);
        expect(replay[3]!.data.reason).toBe("killed");
        const ids = replay.map((e) => Number(e.id));
        expect([...ids].sort((a, b) => a - b)).toEqual(ids);
        // The same history as a JSON page.
        const page = await call<{ events: { id: number; event_type: string }[] }>("GET", `/events?sandbox_id=${sbx.sandboxId}&since_id=${hello.data.last_id}`);
        expect(page.body.events.map((e) => e.event_type)).toEqual(["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.destroyed"]);
      });

      it("a stalled consumer is disconnected once it falls behind its queue: the server does not buffer for it", async () => {
        // The streams' source: the bus (SQLite), or the feed reading Postgres (both count subscribers and cut-offs).
        const source = cp.activity.events as unknown as { overflowed: number; subscriberCount: number };
        const before = source.overflowed;
        const baseline = source.subscriberCount;
        const url = new URL(`${cp.workspaceUrl}/events/stream`);
        const socket = net.connect(Number(url.port), url.hostname);
        await new Promise((r) => socket.once("connect", r));
        socket.write(`GET ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nX-API-Key: ${cp.apiKey}\r\nAccept: text/event-stream\r\n\r\n`);
        const closed = new Promise((r) => socket.once("close", r));
        // Read the headers, then stop reading altogether.
        await new Promise((r) => socket.once("data", r));
        socket.pause();
        const big = "x".repeat(64 * 1024);
        let published = 0;
        while (source.overflowed === before && published < 10_000) {
          cp.activity.bus.publish({ event_type: "exec.started", sandbox_id: "stalledtest", command: big });
          published++;
          // On Postgres the feed hands events on as it reads them (every 250 ms): let it read each 20 before more are written.
          if (published % 20 === 0) await new Promise((r) => (pg ? setTimeout(r, 300) : setImmediate(r)));
        }
        expect(source.overflowed).toBe(before + 1);
        // The server ended the connection: the client sees it once it reads again.
        socket.resume();
        await closed;
        expect(source.subscriberCount).toBe(baseline);
        expect(logText).toContain("event stream subscriber fell too far behind");
      });

      it("the Connect stream resumes with after_id: what it missed, then live events, none twice; OUT_OF_RANGE once they are pruned", async () => {
        const client = apiClient(cp.url, "connect-json", headers());
        const first = await watch(client, { eventTypes: ["sandbox.*"] });
        const hello = first.subscribed;
        first.close();
        expect(hello.id).toBeGreaterThan(0n);
        const sbx = await Sandbox.create("base");
        await sbx.pause();
        await Sandbox.connect(sbx.sandboxId);
        await sbx.kill();

        // Without event_types, after_id means the logged lifecycle events, with the sandbox record as it is now
        // (replayed, or live: on Postgres the kill may be written after the watch began).
        const all = await watch(client, { sandboxId: sbx.sandboxId, afterId: hello.id });
        const replay = await all.until((e) => e.type === SandboxEventType.KILLED);
        all.close();
        expect(replay.map((e) => e.eventType)).toEqual(["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.destroyed"]);
        const ids = replay.map((e) => e.id);
        expect(ids.every((id, i) => id > hello.id && (i === 0 || id > ids[i - 1]!))).toBe(true);
        expect(replay[0]!.sandbox?.sandboxId).toBe(sbx.sandboxId);

        // Resumed after the pause: the rest only; then live events after the replay, none twice.
        const rest = await watch(client, { afterId: ids[1], eventTypes: ["sandbox.*", "exec.*"] });
        await call("POST", `/sandboxes/${sandboxId}/exec`, { command: "echo after-resume" });
        const got = await rest.until((e) => e.type === SandboxEventType.EXEC_COMPLETED && e.activity?.command === "echo after-resume");
        rest.close();
        const mine = got.filter((e) => e.sandboxId === sbx.sandboxId || e.activity?.command === "echo after-resume");
        expect(mine.map((e) => e.eventType)).toEqual(["sandbox.resumed", "sandbox.destroyed", "exec.started", "exec.completed"]);
        const gotIds = got.map((e) => e.id);
        expect(new Set(gotIds).size).toBe(gotIds.length);
        expect([...gotIds].sort((a, b) => (a < b ? -1 : 1))).toEqual(gotIds);

        // Events after hello pruned from the log: resuming there cannot be whole, so it is refused, saying why.
        const log = cp.activity.events.log!;
        await log.prune(Date.now() + 7 * 24 * 3600_000);
        cp.activity.bus.publish({ event_type: "exec.started", sandbox_id: "prunedtest", command: "true" });
        await expect(async () => {
          for await (const _ of client.watchSandboxEvents({ afterId: hello.id })) void _;
        }).rejects.toMatchObject({ code: Code.OutOfRange, rawMessage: expect.stringContaining("older than the event log keeps") });
      });
    });

    describe("audit log", () => {
      it("records each API's operations with the key id and result, the SDK's commands as envd-token, and never a secret", async () => {
        const sbx = await Sandbox.connect(sandboxId);
        await sbx.commands.run(`echo ${SECRET} > /tmp/s; echo done`);
        await apiClient(cp.url, "connect-json", headers()).getSandbox({ sandboxId });
        const bad = await fetch(`${cp.workspaceUrl}/sandboxes/${sandboxId}`, { headers: { "x-api-key": `e2b_${"0".repeat(40)}` } });
        expect(bad.status).toBe(401);
        await call("POST", `/sandboxes/${sandboxId}/exec`, { command: "true", secret_env: { ONE_OFF: "one-off-secret-value" } });
        await call("POST", `/sandboxes/${sandboxId}/exec`, { command: "echo one-off-secret-value" });
        const keyId = (await cp.store.listApiKeys())[0]!.id;

        const res = await fetch(`${cp.workspaceUrl}/audit?sandbox_id=${sandboxId}`, { headers: headers() });
        expect(res.headers.get("content-type")).toContain("application/x-ndjson");
        const text = await res.text();
        const entries = text.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
        const find = (pred: (e: Record<string, unknown>) => boolean) => entries.find(pred);
        expect(find((e) => e.action === "POST /sandboxes" && e.api === "workspace")).toMatchObject({ actor: keyId, result: "ok", status: 201 });
        expect(find((e) => e.api === "e2b" && e.action === "POST /v2/sandboxes/:sandboxID/connect")).toMatchObject({ actor: keyId, result: "ok" });
        expect(find((e) => e.api === "connect" && e.action === "locale2b.controlplane.v1.SandboxService/GetSandbox")).toMatchObject({ actor: keyId, result: "ok" });
        expect(find((e) => e.api === "workspace" && e.status === 401)).toMatchObject({ actor: "anonymous", result: "error" });
        const sdkExec = find((e) => e.api === "envd" && e.action === "exec.completed" && String((e.details as { command?: string }).command).includes("echo done"));
        expect(sdkExec).toMatchObject({ actor: "envd-token", result: "ok", details: { exit_code: 0 } });
        // A workspace exec is one entry (the request), not three.
        expect(entries.filter((e) => e.api === "workspace" && e.action === "POST /sandboxes/:id/exec").length).toBeGreaterThanOrEqual(2);
        expect(entries.some((e) => e.api === "envd" && (e.details as { exec_id?: string })?.exec_id)).toBe(false);
        for (const e of entries) {
          expect(typeof e.id).toBe("number");
          expect(typeof e.time).toBe("string");
          expect(["ok", "error"]).toContain(e.result);
        }

        // No secret in the audit log, the event log or the server's own log.
        const events = JSON.stringify((await call("GET", `/events?sandbox_id=${sandboxId}&limit=10000`)).body);
        const rec = cp.manager.get(sandboxId);
        for (const secret of [cp.apiKey, rec.envdAccessToken, SECRET, "one-off-secret-value"]) {
          expect(text).not.toContain(secret);
          expect(events).not.toContain(secret);
          expect(logText).not.toContain(secret);
        }
        expect(text).toContain("[REDACTED]");
      });

      it("an SDK's mkdir, rename and remove (envd's filesystem API through the proxy) are audited with their paths", async () => {
        const sbx = await Sandbox.connect(sandboxId);
        const dir = `/home/user/audited-${randomBytes(3).toString("hex")}`;
        await sbx.files.makeDir(dir);
        await sbx.files.write(`${dir}/a.txt`, "x");
        await sbx.files.rename(`${dir}/a.txt`, `${dir}/b.txt`);
        await sbx.files.remove(dir);
        const audited = async () => {
          const text = await (await fetch(`${cp.workspaceUrl}/audit?sandbox_id=${sandboxId}`, { headers: headers() })).text();
          return text.trim().split("\n").map((l) => JSON.parse(l) as { actor: string; api: string; action: string; details?: Record<string, unknown> });
        };
        let entries = await audited();
        for (let i = 0; i < 200 && !entries.some((e) => e.action === "file.remove" && e.details?.path === dir); i++) {
          await new Promise((r) => setTimeout(r, 50));
          entries = await audited();
        }
        const mine = entries.filter((e) => ["file.mkdir", "file.move", "file.remove"].includes(e.action) && String(e.details?.path).startsWith(dir));
        expect(mine.map((e) => [e.action, e.details])).toEqual([
          ["file.mkdir", { path: dir, user: "user" }],
          ["file.move", { path: `${dir}/a.txt`, destination: `${dir}/b.txt`, user: "user" }],
          ["file.remove", { path: dir, user: "user" }],
        ]);
        expect(mine.every((e) => e.actor === "envd-token" && e.api === "envd")).toBe(true);
      });

      it("`locale2b audit export --since` writes the same entries as JSON Lines", async () => {
        const since = new Date(Date.now() - 3_600_000).toISOString();
        const { stdout } = await promisify(execFile)(
          process.execPath,
          [join(ROOT, "dist", "control-plane", "cli", "main.js"), "audit", "export", "--since", since, "--url", cp.url],
          { env: { ...process.env, LOCALE2B_API_KEY: cp.apiKey, E2B_API_KEY: "" }, maxBuffer: 64 * 1024 * 1024 },
        );
        const lines = stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: number; action: string });
        expect(lines.length).toBeGreaterThan(5);
        expect(lines.map((l) => l.id)).toEqual([...lines.map((l) => l.id)].sort((a, b) => a - b));
        expect(lines.some((l) => l.action === "POST /sandboxes")).toBe(true);
      });
    });

    describe("metrics history", () => {
      it("E2B getMetrics with a past range returns that range's samples; the batch route the latest of each", async () => {
        const sbx = await Sandbox.connect(sandboxId);
        // Wait (by polling, not by time) until the history spans a few seconds.
        let all: Awaited<ReturnType<Sandbox["getMetrics"]>> = [];
        for (;;) {
          all = await sbx.getMetrics({ start: new Date(Date.now() - 600_000), end: new Date() });
          const seconds = new Set(all.map((m) => Math.floor(m.timestamp.getTime() / 1000)));
          if (seconds.size >= 4) break;
          await new Promise((r) => setTimeout(r, 200));
        }
        const seconds = [...new Set(all.map((m) => Math.floor(m.timestamp.getTime() / 1000)))].sort();
        const pick = seconds[1]!; // a whole past second
        const range = await sbx.getMetrics({ start: new Date(pick * 1000), end: new Date(pick * 1000) });
        const expected = all.filter((m) => Math.floor(m.timestamp.getTime() / 1000) === pick);
        expect(range.length).toBe(expected.length);
        expect(range.length).toBeGreaterThan(0);
        expect(range.map((m) => m.timestamp.getTime())).toEqual(expected.map((m) => m.timestamp.getTime()));
        for (const m of range) {
          expect(m.cpuCount).toBe(1);
          expect(m.memTotal).toBe(512 * 1024 * 1024);
          expect(m.memUsed).toBeGreaterThan(0);
        }
        // A range before the sandbox existed is empty.
        expect(await sbx.getMetrics({ start: new Date(Date.now() - 7_200_000), end: new Date(Date.now() - 3_600_000) })).toEqual([]);
        const batch = await fetch(`${cp.url}/sandboxes/metrics?sandbox_ids=${sandboxId},nosuchsandbox`, { headers: headers() });
        const body = (await batch.json()) as { sandboxes: Record<string, { timestampUnix: number }> };
        expect(Object.keys(body.sandboxes)).toEqual([sandboxId]);
        expect(body.sandboxes[sandboxId]!.timestampUnix).toBeGreaterThanOrEqual(pick);
      });

      it("the workspace metrics route has the current figures and the samples of the range; /metrics has the series", async () => {
        const m = await call<Record<string, unknown>>("GET", `/sandboxes/${sandboxId}/metrics?start=${Math.floor(Date.now() / 1000) - 60}`);
        expect(m.status).toBe(200);
        for (const k of ["cpu_percent", "memory_used_bytes", "memory_total_bytes", "disk_used_bytes", "disk_total_bytes", "disk_read_bytes", "disk_write_bytes"]) {
          expect(typeof m.body[k], k).toBe("number");
        }
        // A process sandbox has a network of its own (a veth): its own network I/O counters.
        expect(typeof m.body.network_rx_bytes).toBe("number");
        expect((m.body.samples as unknown[]).length).toBeGreaterThan(1);
        const prom = await (await fetch(`${cp.url}/metrics`)).text();
        expect(prom).toMatch(new RegExp(`locale2b_sandbox_cpu_used_percent\\{sandbox_id="${sandboxId}"\\} \\d`));
        expect(prom).toMatch(new RegExp(`locale2b_sandbox_memory_used_bytes\\{sandbox_id="${sandboxId}"\\} \\d+`));
        expect(prom).toMatch(/locale2b_events_total\{type="exec.started"\} \d+/);
        expect(prom).toContain("locale2b_event_subscribers_overflowed_total 1");
      });
    });
  });
}
