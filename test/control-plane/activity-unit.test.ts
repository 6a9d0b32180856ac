// The pieces under the workspace API's sessions, events and audit log, without a server.
import { create } from "@bufbuild/protobuf";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { ActivityEventSchema, WatchActivityResponseSchema } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import { AuditLog } from "../../control-plane/audit/audit-log.js";
import { AuditClaims } from "../../control-plane/audit/claims.js";
import { REDACTED, Redactor, SECRET_ENV_METADATA, secretEnvNames } from "../../control-plane/audit/redact.js";
import { EventBus } from "../../control-plane/events/bus.js";
import { ActivityTranslator, commandOf, controlTags, internalTag, watchedEvents } from "../../control-plane/events/envd-activity.js";
import { isProxiedFlow, parseConntrackLine } from "../../control-plane/events/network-watch.js";
import { EventLog } from "../../control-plane/events/event-log.js";
import { eventFilter, matchesEvent, parseEventTypes } from "../../control-plane/events/filter.js";
import type { SandboxRecord } from "../../control-plane/domain/sandbox.js";
import { OutputSpool } from "../../control-plane/sessions/output-spool.js";
import { incompleteUtf8Tail } from "../../control-plane/sessions/session.js";
import { ActivityDb } from "../../control-plane/store/activity-db.js";
import { SqliteActivityHistory } from "../../control-plane/store/sqlite-activity-history.js";
import { sandboxPath } from "../../control-plane/api/workspace/paths.js";

const dirs: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), "locale2b-unit-"));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const log = pino({ level: "silent" });

describe("OutputSpool", () => {
  it("addresses output by offset across segments and keeps only the newest bytes under its cap", () => {
    const spool = new OutputSpool(join(tmp(), "s"), 16 * 1024);
    const chunk = (i: number) => Buffer.alloc(1000, 65 + (i % 26));
    for (let i = 0; i < 40; i++) spool.append(chunk(i));
    expect(spool.end).toBe(40_000);
    expect(spool.start).toBeGreaterThan(0);
    expect(spool.end - spool.start).toBeLessThanOrEqual(16 * 1024);
    expect(spool.end - spool.start).toBeGreaterThanOrEqual(12 * 1024 - 4096);
    // Asking for what was dropped: told how much, given what follows.
    const r = spool.read(0, 100);
    expect(r.dropped).toBe(spool.start);
    expect(r.from).toBe(spool.start);
    // Exact bytes at an offset that spans two segments.
    const at = spool.end - 5000;
    const got = spool.read(at, 3000);
    expect(got.from).toBe(at);
    expect(got.data.length).toBe(3000);
    for (let k = 0; k < 3000; k++) expect(got.data[k]).toBe(65 + (Math.floor((at + k) / 1000) % 26));
    expect(spool.read(spool.end, 10).data.length).toBe(0);
    spool.close();
  });

  it("reopens what an earlier control plane wrote", () => {
    const dir = join(tmp(), "s");
    const a = new OutputSpool(dir, 1 << 20);
    a.append(Buffer.from("hello "));
    a.close();
    const b = new OutputSpool(dir, 1 << 20);
    b.append(Buffer.from("world"));
    expect(b.read(0, 100).data.toString()).toBe("hello world");
    b.remove();
    expect(() => readdirSync(dir)).toThrow();
  });

  it("finds an incomplete UTF-8 character at the end of a chunk", () => {
    const euro = Buffer.from("€"); // 3 bytes
    expect(incompleteUtf8Tail(Buffer.from("ab"))).toBe(0);
    expect(incompleteUtf8Tail(Buffer.concat([Buffer.from("a"), euro]))).toBe(0);
    expect(incompleteUtf8Tail(Buffer.concat([Buffer.from("a"), euro.subarray(0, 1)]))).toBe(1);
    expect(incompleteUtf8Tail(Buffer.concat([Buffer.from("a"), euro.subarray(0, 2)]))).toBe(2);
    expect(incompleteUtf8Tail(Buffer.from("😀").subarray(0, 3))).toBe(3);
  });
});

describe("event filters", () => {
  it("takes exact types, prefixes and *, and names the known ones for an unknown one", () => {
    expect([...parseEventTypes(["exec.*"])!]).toEqual(["exec.started", "exec.completed", "exec.failed"]);
    expect(parseEventTypes(["*"])).toBeUndefined();
    expect(parseEventTypes([])).toBeUndefined();
    expect(() => parseEventTypes(["exec.begun"])).toThrow(/unknown event type 'exec.begun': use one of sandbox.created/);
    const f = eventFilter(["a"], ["file.read"]);
    expect(matchesEvent(f, { sandbox_id: "a", event_type: "file.read" })).toBe(true);
    expect(matchesEvent(f, { sandbox_id: "b", event_type: "file.read" })).toBe(false);
    expect(matchesEvent(f, { sandbox_id: "a", event_type: "file.written" })).toBe(false);
  });
});

describe("ActivityDb", () => {
  it("runs only the latest of the queued writes with one key, in its place in the queue", () => {
    const db = new ActivityDb(join(tmp(), "a.db"), log);
    const upsert = "INSERT OR REPLACE INTO envd_cursors (sandbox_id, stream_id, seq) VALUES (?, ?, ?)";
    const cursor = (id: string) => db.get<{ seq: number }>("SELECT seq FROM envd_cursors WHERE sandbox_id = ?", [id])?.seq;
    // Replaced ones are not run: a row they alone would write is never there.
    db.writeLatest("cursor:a", "INSERT INTO envd_cursors (sandbox_id, stream_id, seq) VALUES ('x', 's', 99)", []);
    for (let seq = 1; seq <= 5; seq++) db.writeLatest("cursor:a", upsert, ["a", "s", seq]);
    db.writeLatest("cursor:b", upsert, ["b", "s", 7]);
    db.flush();
    expect(cursor("a")).toBe(5);
    expect(cursor("b")).toBe(7);
    expect(cursor("x")).toBeUndefined();
    // The order with other writes holds: a delete queued after the latest upsert wins, one queued before it does not.
    db.writeLatest("cursor:a", upsert, ["a", "s", 6]);
    db.write("DELETE FROM envd_cursors WHERE sandbox_id = ?", ["a"]);
    db.write("DELETE FROM envd_cursors WHERE sandbox_id = ?", ["b"]);
    db.writeLatest("cursor:b", upsert, ["b", "s", 8]);
    db.flush();
    expect(cursor("a")).toBeUndefined();
    expect(cursor("b")).toBe(8);
    db.close();
  });
});

describe("EventBus", () => {
  it("numbers events, logs them, continues the numbering after a restart, and replays pages", async () => {
    const path = join(tmp(), "a.db");
    let db = new ActivityDb(path, log);
    let bus = new EventBus(new EventLog(new SqliteActivityHistory(db), 3_600_000));
    bus.publish({ event_type: "sandbox.created", sandbox_id: "a" });
    bus.publish({ event_type: "exec.started", sandbox_id: "b", command: "ls" });
    db.close();
    db = new ActivityDb(path, log);
    const eventLog = new EventLog(new SqliteActivityHistory(db), 3_600_000);
    bus = new EventBus(eventLog, undefined, await eventLog.lastId());
    const third = bus.publish({ event_type: "file.read", sandbox_id: "a", path: "/x", bytes: 3 });
    expect(third.id).toBe(3);
    expect((await bus.log!.page(0, {}, 10)).map((e) => e.id)).toEqual([1, 2, 3]);
    expect((await bus.log!.page(1, eventFilter(["a"], []), 10)).map((e) => e.id)).toEqual([3]);
    db.close();
  });

  it("cuts off a subscriber that falls `limit` events behind, freeing its queue, without touching the others", async () => {
    const bus = new EventBus(undefined, 5);
    const slow = bus.subscribe({});
    const fast = bus.subscribe({});
    let cut = 0;
    slow.onOverflow = () => cut++;
    const seen: number[] = [];
    const reading = (async () => {
      for (;;) {
        const n = await fast.next();
        if (n.kind !== "event") return;
        seen.push(n.event.id);
        if (seen.length === 20) return;
      }
    })();
    for (let i = 0; i < 20; i++) {
      bus.publish({ event_type: "exec.started", sandbox_id: "a" });
      await Promise.resolve();
    }
    await reading;
    expect(seen).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(cut).toBe(1);
    expect(slow.queued).toBe(0);
    expect((await slow.next()).kind).toBe("overflow");
    slow.close();
    fast.close();
    expect(bus.subscriberCount).toBe(0);
  });
});

const ev = (seq: number, event: unknown) => create(ActivityEventSchema, { seq: BigInt(seq), time: { seconds: 1_700_000_000n, nanos: 0 }, event: event as never });

describe("ActivityTranslator", () => {
  it("reads a watch message's batch, and the one event of an older envd", () => {
    const a = ev(1, { case: "fileRead", value: { path: "/a", bytes: 1n, user: "u" } });
    const b = ev(2, { case: "fileRead", value: { path: "/b", bytes: 1n, user: "u" } });
    expect(watchedEvents(create(WatchActivityResponseSchema, { streamId: "s", events: [a, b] }))).toEqual([a, b]);
    // Before `events`, envd sent one event per message in `event`.
    expect(watchedEvents(create(WatchActivityResponseSchema, { streamId: "s", event: a }))).toEqual([a]);
    expect(watchedEvents(create(WatchActivityResponseSchema, { streamId: "s" }))).toEqual([]);
  });

  it("names a shell's -c script as the command, carries the session id, and ends with the command it started", () => {
    expect(commandOf("/bin/bash", ["-l", "-c", "echo hi"])).toBe("echo hi");
    expect(commandOf("/usr/bin/python3", ["-c", "print(1)", "x y"])).toBe("/usr/bin/python3 -c 'print(1)' 'x y'");
    const t = new ActivityTranslator("sbx", (s) => s.replace("hunter2", REDACTED));
    const started = t.translate(ev(1, { case: "processStarted", value: { pid: 7, cmd: "/bin/bash", args: ["-l", "-c", "echo hunter2"], cwd: "/workspace", user: "user", tag: "l2b-session-s1", pty: true } }));
    expect(started).toMatchObject({ event_type: "exec.started", session_id: "s1", command: `echo ${REDACTED}`, pid: 7, time: 1_700_000_000_000 });
    const ended = t.translate(ev(2, { case: "processEnded", value: { pid: 7, tag: "l2b-session-s1", exitCode: 2, exited: true, status: "exit status 2", error: "exit status 2", durationMs: 12n } }));
    expect(ended).toMatchObject({ event_type: "exec.failed", session_id: "s1", command: `echo ${REDACTED}`, exit_code: 2, duration_ms: 12, error: "exit status 2" });
    const ok = t.translate(ev(3, { case: "processEnded", value: { pid: 8, exitCode: 0, exited: true, status: "exit status 0", durationMs: 1n } }));
    expect(ok).toMatchObject({ event_type: "exec.completed", exit_code: 0 });
    expect(ok).not.toHaveProperty("error");
    // The control plane's own processes carry a tag it issued: no events, for their start or their end.
    const own = internalTag("sbx", "x");
    expect(t.translate(ev(4, { case: "processStarted", value: { pid: 9, cmd: "/bin/sh", args: [], cwd: "/", user: "root", tag: own, pty: false } }))).toBeUndefined();
    expect(t.translate(ev(6, { case: "processEnded", value: { pid: 9, tag: own, exitCode: 0, exited: true, status: "exit status 0", durationMs: 1n } }))).toBeUndefined();
    expect(t.translate(ev(5, { case: "fileWritten", value: { path: "/workspace/a", bytes: 5n, user: "user" } }))).toMatchObject({ event_type: "file.written", path: "/workspace/a", bytes: 5 });
  });
});

describe("control-plane tags cannot be forged from inside a sandbox", () => {
  it("a process that names itself internal, or reuses an issued tag, is an ordinary command: evented, with no exec id", () => {
    const t = new ActivityTranslator("sbx", (s) => s);
    const start = (seq: number, pid: number, tag: string) =>
      t.translate(ev(seq, { case: "processStarted", value: { pid, cmd: "/bin/sh", args: ["-c", "rm -rf /data"], cwd: "/", user: "root", tag, pty: false } }));
    // Made up: never issued.
    expect(start(1, 10, "l2b-internal-workspace")).toMatchObject({ event_type: "exec.started", command: "rm -rf /data" });
    expect(start(2, 11, "l2b-exec-abc")).not.toHaveProperty("exec_id");
    // Copied from `commands.list()` after the control plane's own process used it: used up.
    const own = internalTag("sbx", "workspace");
    expect(start(3, 12, own)).toBeUndefined();
    expect(start(4, 13, own)).toMatchObject({ event_type: "exec.started" });
    const exec = controlTags.issue("sbx", "l2b-exec-def");
    expect(start(5, 14, exec)).toMatchObject({ exec_id: "def" });
    expect(start(6, 15, exec)).not.toHaveProperty("exec_id");
    // Issued for another sandbox: not this one's.
    expect(start(7, 16, internalTag("other", "x"))).toMatchObject({ event_type: "exec.started" });
    // The end of a forged internal process is an event too.
    expect(t.translate(ev(8, { case: "processEnded", value: { pid: 10, tag: "l2b-internal-workspace", exitCode: 0, exited: true, status: "exit status 0", durationMs: 1n } }))).toMatchObject({ event_type: "exec.completed" });
  });
});

describe("network.request: conntrack's new flows", () => {
  it("reads the original direction's protocol, destination and port; other lines are not flows", () => {
    expect(parseConntrackLine("    [NEW] tcp      6 120 SYN_SENT src=10.201.0.2 dst=203.0.113.80 sport=48934 dport=443 [UNREPLIED] src=203.0.113.80 dst=192.0.2.2 sport=443 dport=48934")).toEqual({
      protocol: "tcp",
      source: "10.201.0.2",
      destination: "203.0.113.80",
      port: 443,
    });
    expect(parseConntrackLine(" [NEW] udp      17 30 src=10.201.0.6 dst=1.1.1.1 sport=37910 dport=53 [UNREPLIED] src=1.1.1.1 dst=192.0.2.2 sport=53 dport=37910")).toMatchObject({ protocol: "udp", port: 53 });
    expect(parseConntrackLine(" [NEW] icmp     1 30 src=10.201.0.2 dst=203.0.113.9 type=8 code=0 id=7 [UNREPLIED] src=203.0.113.9 dst=10.201.0.2 type=0 code=0 id=7")).toEqual({
      protocol: "icmp",
      source: "10.201.0.2",
      destination: "203.0.113.9",
      port: undefined,
    });
    expect(parseConntrackLine("conntrack v1.4.7 (conntrack-tools): 3 flow events have been shown.")).toBeUndefined();
    // A flow nft redirected to the sandbox's egress proxy (the reply comes from its listener): the proxy reports it, if it lets it out.
    const redirected = " [NEW] tcp      6 120 SYN_SENT src=10.201.0.2 dst=203.0.113.80 sport=48934 dport=443 [UNREPLIED] src=10.201.0.1 dst=10.201.0.2 sport=15093 dport=48934";
    expect(isProxiedFlow(redirected)).toBe(true);
    expect(parseConntrackLine(redirected)).toMatchObject({ destination: "203.0.113.80", port: 443 });
    expect(isProxiedFlow(" [NEW] tcp      6 120 SYN_SENT src=10.201.0.2 dst=203.0.113.80 sport=48934 dport=443 [UNREPLIED] src=203.0.113.80 dst=192.0.2.2 sport=443 dport=48934")).toBe(false);
    // A server out there that happens to listen on the proxy's port is just a destination.
    expect(isProxiedFlow(" [NEW] tcp      6 120 SYN_SENT src=10.201.0.2 dst=203.0.113.80 sport=48934 dport=15093 [UNREPLIED] src=203.0.113.80 dst=192.0.2.2 sport=15093 dport=48934")).toBe(false);
    expect(parseConntrackLine(" [DESTROY] tcp 6 src=10.201.0.2 dst=203.0.113.80 sport=1 dport=2")).toBeUndefined();
  });
});

describe("secrets", () => {
  const rec = {
    id: "sbx",
    envVars: { OPENAI_API_KEY: "sk-live-123456", PLAIN: "visible-value", MARKED: "marked-secret-value", SHORT_TOKEN: "abc" },
    metadata: { [SECRET_ENV_METADATA]: "MARKED" },
    envdAccessToken: "envd-token-0123456789",
    trafficAccessToken: "traffic-token-0123456789",
  } as unknown as SandboxRecord;

  it("treats marked env vars and secret-looking names as secret, and redacts them, tokens and any API key", () => {
    expect(secretEnvNames(rec).sort()).toEqual(["MARKED", "OPENAI_API_KEY", "SHORT_TOKEN"]);
    const r = new Redactor();
    r.remember(rec);
    const key = `e2b_${"ab".repeat(20)}`;
    const text = `curl -H 'X-API-Key: ${key}' -d sk-live-123456 marked-secret-value envd-token-0123456789 visible-value abc`;
    const out = r.redact(text, "sbx");
    expect(out).toBe(`curl -H 'X-API-Key: ${REDACTED}' -d ${REDACTED} ${REDACTED} ${REDACTED} visible-value abc`);
    // Without the sandbox only API keys are known.
    expect(r.redact(text)).toContain("sk-live-123456");
    r.forget("sbx");
    expect(r.redact("sk-live-123456", "sbx")).toBe("sk-live-123456");
  });

  it("the audit log redacts messages and every string in details", async () => {
    const db = new ActivityDb(join(tmp(), "a.db"), log);
    const r = new Redactor();
    r.remember(rec);
    const audit = new AuditLog(new SqliteActivityHistory(db), r, 3_600_000);
    audit.record({ actor: "key_1", api: "workspace", action: "POST /x", sandbox_id: "sbx", result: "error", message: "bad sk-live-123456", details: { command: "echo marked-secret-value", nested: ["envd-token-0123456789"] } });
    const [e] = await audit.query({ limit: 10 });
    expect(JSON.stringify(e)).not.toMatch(/sk-live|marked-secret|envd-token/);
    expect(e).toMatchObject({ id: 1, actor: "key_1", message: `bad ${REDACTED}`, details: { command: `echo ${REDACTED}`, nested: [REDACTED] } });
    db.close();
  });

  it("a claim makes the audit skip envd's report of an operation once", () => {
    const c = new AuditClaims();
    c.claim("s", "file.read", "/a");
    expect(c.take("s", "file.read", "/b")).toBe(false);
    expect(c.take("s", "file.read", "/a")).toBe(true);
    expect(c.take("s", "file.read", "/a")).toBe(false);
  });
});

describe("workspace paths", () => {
  it("resolves relative paths in /workspace, normalises, and refuses what would leave it, NUL bytes and ~", () => {
    expect(sandboxPath("a/b.txt")).toBe("/workspace/a/b.txt");
    expect(sandboxPath("./a/../b")).toBe("/workspace/b");
    expect(sandboxPath("/etc/hosts")).toBe("/etc/hosts");
    expect(sandboxPath("/workspace/x/../../etc")).toBe("/etc");
    expect(() => sandboxPath("../etc/passwd")).toThrow(/may not leave \/workspace/);
    expect(() => sandboxPath("a\0b")).toThrow(/NUL/);
    expect(() => sandboxPath("~/x")).toThrow(/'~' is not expanded/);
    expect(() => sandboxPath("")).toThrow(/'path' is required/);
    expect(() => sandboxPath(3)).toThrow(/must be a string/);
  });
});
