// The activity history contract (events, audit entries, metric samples),
// run against both: one box's activity.db (SQLite) and the fleet's Postgres
// (a real server, started by the test from Debian's binaries). Postgres also:
// two hosts writing at once get ids in one order, and a reader paging by id
// while they write misses nothing.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditLog } from "../../control-plane/audit/audit-log.js";
import { Redactor } from "../../control-plane/audit/redact.js";
import { EventBus } from "../../control-plane/events/bus.js";
import { EventFeed } from "../../control-plane/events/event-feed.js";
import { EventLog } from "../../control-plane/events/event-log.js";
import { eventFilter } from "../../control-plane/events/filter.js";
import type { SandboxEvent } from "../../control-plane/events/types.js";
import type { MetricSample } from "../../control-plane/metrics/history.js";
import { ActivityDb } from "../../control-plane/store/activity-db.js";
import type { ActivityHistory } from "../../control-plane/store/activity-history.js";
import { PgActivityHistory } from "../../control-plane/store/pg-activity-history.js";
import { PgStore } from "../../control-plane/store/pg-store.js";
import { SqliteActivityHistory } from "../../control-plane/store/sqlite-activity-history.js";
import { postgresMissing, startPostgres, type TestPostgres } from "../helpers/postgres.js";

const missing = postgresMissing();
if (missing) console.warn(`activity-history.test.ts: skipping Postgres: ${missing}`);
const log = pino({ level: "silent" });

let server: TestPostgres | undefined;
const dirs: string[] = [];
const closers: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  if (!missing) server = await startPostgres();
}, 60_000);

afterAll(async () => {
  for (const c of closers.reverse()) await c();
  await server?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A new, empty Postgres database with the fleet's schema (PgStore.open migrates it). */
async function pgDatabase(): Promise<string> {
  const url = await server!.database();
  await (await PgStore.open(url, { max: 1 })).close();
  return url;
}

/** A new, empty history of `kind`; `reopen` gives another handle on the same one (a restart, or another host). */
async function fresh(kind: string): Promise<{ history: ActivityHistory; reopen: () => Promise<ActivityHistory> }> {
  if (kind === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "locale2b-history-"));
    dirs.push(dir);
    const open = () => {
      const db = new ActivityDb(join(dir, "activity.db"), log);
      closers.push(() => db.close());
      return new SqliteActivityHistory(db);
    };
    return { history: open(), reopen: async () => open() };
  }
  const url = await pgDatabase();
  const open = () => {
    const h = PgActivityHistory.open(url, log);
    closers.push(() => h.close());
    return h;
  };
  return { history: open(), reopen: async () => open() };
}

function sample(time: number, over: Partial<MetricSample> = {}): MetricSample {
  return { time, cpuCount: 2, cpuUsedPct: 1.5, memUsed: 100, memTotal: 1000, diskUsed: 10, diskTotal: 100, diskReadBytes: null, diskWriteBytes: 5, netRxBytes: null, netTxBytes: null, ...over };
}

/** A bus over `history` as startActivity makes it. */
async function busOver(history: ActivityHistory): Promise<EventBus> {
  const eventLog = new EventLog(history, 3_600_000);
  return new EventBus(eventLog, undefined, history.numbers ? 0 : await eventLog.lastId());
}

for (const kind of [
  { name: "sqlite", skip: false },
  { name: "postgres", skip: missing !== undefined },
]) {
  describe.skipIf(kind.skip)(`the activity history: ${kind.name}`, () => {
    it("numbers events in order, hands them to subscribers with the ids the log keeps, pages them by id, sandbox, type and time, and goes on numbering after a restart", async () => {
      const { history, reopen } = await fresh(kind.name);
      const bus = await busOver(history);
      const sub = bus.subscribe({});
      bus.publish({ event_type: "sandbox.created", sandbox_id: "a", time: 1_000 });
      bus.publish({ event_type: "exec.started", sandbox_id: "b", command: "ls", time: 2_000 });
      bus.publish({ event_type: "file.read", sandbox_id: "a", path: "/x", bytes: 3, time: 3_000 });
      await history.flush();
      const live: SandboxEvent[] = [];
      for (let i = 0; i < 3; i++) {
        const next = await sub.next();
        if (next.kind === "event") live.push(next.event);
      }
      const all = await bus.log!.page(0, {}, 10);
      expect(all).toEqual(live);
      const ids = all.map((e) => e.id);
      expect(ids).toEqual([...ids].sort((x, y) => x - y));
      expect(new Set(ids).size).toBe(3);
      expect(all.map((e) => e.event_type)).toEqual(["sandbox.created", "exec.started", "file.read"]);
      expect((await bus.log!.page(0, eventFilter(["a"], []), 10)).map((e) => e.id)).toEqual([ids[0], ids[2]]);
      expect((await bus.log!.page(0, eventFilter([], ["exec.*"]), 10)).map((e) => e.id)).toEqual([ids[1]]);
      expect((await bus.log!.page(ids[0]!, {}, 1)).map((e) => e.id)).toEqual([ids[1]]);
      expect((await bus.log!.page(0, {}, 10, 2_000)).map((e) => e.id)).toEqual([ids[1], ids[2]]);
      expect(await history.eventIds()).toEqual({ oldest: ids[0], newest: ids[2] });
      sub.close();

      const again = await busOver(await reopen());
      again.publish({ event_type: "sandbox.destroyed", sandbox_id: "a" });
      await again.log!.history.flush();
      const after = await again.log!.page(ids[2]!, {}, 10);
      expect(after).toHaveLength(1);
      expect(after[0]!.id).toBeGreaterThan(ids[2]!);
    });

    it("queues writes and writes them together: 500 events from one flush, numbered in the order they were published", async () => {
      const { history } = await fresh(kind.name);
      const bus = await busOver(history);
      for (let i = 0; i < 500; i++) bus.publish({ event_type: "exec.started", sandbox_id: `s${i % 7}`, command: `c${i}` });
      await history.flush();
      const page = await bus.log!.page(0, {}, 1000);
      expect(page.map((e) => e.command)).toEqual(Array.from({ length: 500 }, (_, i) => `c${i}`));
      expect(page.at(-1)!.id - page[0]!.id).toBe(499);
    });

    it("records audit entries and reads them by sandbox, actor, action, time, oldest or newest first, paged by id", async () => {
      const { history } = await fresh(kind.name);
      const audit = new AuditLog(history, new Redactor(), 3_600_000);
      audit.record({ actor: "key_1", api: "e2b", action: "POST /sandboxes", sandbox_id: "a", result: "ok", status: 201, time: 1_000 });
      audit.record({ actor: "key_2", api: "workspace", action: "POST /sandboxes/:id/pause", sandbox_id: "b", result: "ok", time: 2_000 });
      audit.record({ actor: "system", api: "system", action: "sandbox.timeout", sandbox_id: "a", result: "ok", time: 3_000 });
      audit.record({ actor: "key_1", api: "dashboard", action: "POST /dashboard/session", result: "error", status: 401, message: "invalid API key", time: 4_000 });
      const all = await audit.query({ limit: 10 });
      expect(all.map((e) => e.action)).toEqual(["POST /sandboxes", "POST /sandboxes/:id/pause", "sandbox.timeout", "POST /dashboard/session"]);
      const ids = all.map((e) => e.id);
      expect(ids).toEqual([...ids].sort((x, y) => x - y));
      expect(all[3]).toMatchObject({ actor: "key_1", result: "error", status: 401, message: "invalid API key", time: new Date(4_000).toISOString() });
      expect(all[3]!.sandbox_id).toBeUndefined();
      expect((await audit.query({ limit: 10, sandboxId: "a" })).map((e) => e.id)).toEqual([ids[0], ids[2]]);
      expect((await audit.query({ limit: 10, actor: "key_1" })).map((e) => e.id)).toEqual([ids[0], ids[3]]);
      expect((await audit.query({ limit: 10, action: "pause" })).map((e) => e.id)).toEqual([ids[1]]);
      expect((await audit.query({ limit: 10, sinceMs: 2_000, untilMs: 4_000 })).map((e) => e.id)).toEqual([ids[1], ids[2]]);
      expect((await audit.query({ limit: 2, newestFirst: true })).map((e) => e.id)).toEqual([ids[3], ids[2]]);
      expect((await audit.query({ limit: 2, newestFirst: true, beforeId: ids[2] })).map((e) => e.id)).toEqual([ids[1], ids[0]]);
      expect((await audit.query({ limit: 2, afterId: ids[1] })).map((e) => e.id)).toEqual([ids[2], ids[3]]);
    });

    it("keeps metric samples by sandbox and time (a second sample at the same time replaces the first), ranges inclusive, the latest of each", async () => {
      const { history } = await fresh(kind.name);
      history.addSample("a", sample(1_000));
      history.addSample("a", sample(2_000));
      history.addSample("a", sample(2_000, { cpuUsedPct: 42 }));
      history.addSample("a", sample(3_000));
      history.addSample("b", sample(1_500, { netRxBytes: 7 }));
      expect((await history.samples("a", 1_000, 2_000)).map((s) => [s.time, s.cpuUsedPct])).toEqual([
        [1_000, 1.5],
        [2_000, 42],
      ]);
      expect(await history.samples("a", 3_001, 9_000)).toEqual([]);
      expect((await history.samples("a", 0, 9_000, 1)).map((s) => s.time)).toEqual([1_000]);
      const latest = await history.latestSamples(["a", "b", "nope"]);
      expect([...latest.keys()].sort()).toEqual(["a", "b"]);
      expect(latest.get("a")!.time).toBe(3_000);
      expect(latest.get("b")).toEqual(sample(1_500, { netRxBytes: 7 }));
    });

    it("prunes each kind of history older than its cut-off, and only that", async () => {
      const { history } = await fresh(kind.name);
      const bus = await busOver(history);
      const audit = new AuditLog(history, new Redactor(), 3_600_000);
      bus.publish({ event_type: "sandbox.created", sandbox_id: "a", time: 1_000 });
      bus.publish({ event_type: "sandbox.destroyed", sandbox_id: "a", time: 5_000 });
      audit.record({ actor: "system", api: "system", action: "old", result: "ok", time: 1_000 });
      audit.record({ actor: "system", api: "system", action: "new", result: "ok", time: 5_000 });
      history.addSample("a", sample(1_000));
      history.addSample("a", sample(5_000));
      await history.flush();
      expect(await history.prune("events", 2_000)).toBe(1);
      expect(await history.prune("audit", 2_000)).toBe(1);
      expect(await history.prune("samples", 2_000)).toBe(1);
      expect((await bus.log!.page(0, {}, 10)).map((e) => e.event_type)).toEqual(["sandbox.destroyed"]);
      expect((await audit.query({ limit: 10 })).map((e) => e.action)).toEqual(["new"]);
      expect((await history.samples("a", 0, 9_000)).map((s) => s.time)).toEqual([5_000]);
      const { oldest, newest } = await history.eventIds();
      expect(oldest).toBe(newest);
    });
  });
}

describe.skipIf(missing !== undefined)("the activity history in Postgres: many hosts", () => {
  it("two hosts writing at once: ids unique and in each host's order, and a reader paging by id as they write misses nothing", async () => {
    const url = await pgDatabase();
    const hosts = [0, 1].map(() => PgActivityHistory.open(url, log));
    const reader = PgActivityHistory.open(url, log);
    closers.push(...hosts.map((h) => () => h.close()), () => reader.close());
    const buses = await Promise.all(hosts.map(busOver));
    let writing = true;
    const seen: SandboxEvent[] = [];
    const reading = (async () => {
      const readLog = new EventLog(reader, 3_600_000);
      let after = 0;
      for (;;) {
        const done = !writing;
        const page = await readLog.page(after, {}, 1000);
        seen.push(...page);
        if (page.length) after = page.at(-1)!.id;
        if (done && page.length === 0) return;
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    // 20 rounds of 25 events from each host, flushed at once so their transactions overlap.
    for (let round = 0; round < 20; round++) {
      buses.forEach((bus, h) => {
        for (let i = 0; i < 25; i++) bus.publish({ event_type: "exec.started", sandbox_id: `h${h}`, command: `${round}-${i}` });
      });
      await Promise.all(hosts.map((h) => h.flush()));
    }
    writing = false;
    await reading;
    const all = await new EventLog(reader, 3_600_000).page(0, {}, 10_000);
    expect(all).toHaveLength(1000);
    expect(new Set(all.map((e) => e.id)).size).toBe(1000);
    // What the reader saw, paging by id while the hosts wrote: every event, none twice.
    expect(seen.map((e) => e.id)).toEqual(all.map((e) => e.id));
    for (const h of ["h0", "h1"]) {
      const mine = all.filter((e) => e.sandbox_id === h).map((e) => e.command);
      expect(mine).toEqual(Array.from({ length: 500 }, (_, i) => `${Math.floor(i / 25)}-${i % 25}`));
    }
  }, 60_000);

  it("an event feed hands on every host's events in id order, from after the id current when it subscribed", async () => {
    const url = await pgDatabase();
    const hosts = [0, 1].map(() => PgActivityHistory.open(url, log));
    const replica = PgActivityHistory.open(url, log);
    closers.push(...hosts.map((h) => () => h.close()), () => replica.close());
    const [b0, b1] = await Promise.all(hosts.map(busOver));
    b0!.publish({ event_type: "sandbox.created", sandbox_id: "before" });
    await hosts[0]!.flush();
    const feed = new EventFeed(new EventLog(replica, 3_600_000), log, 20);
    closers.push(() => feed.close());
    const sub = feed.subscribe(eventFilter([], ["exec.*"]));
    const start = await feed.currentId();
    expect(start).toBe((await replica.eventIds()).newest);
    for (let i = 0; i < 10; i++) (i % 2 ? b1 : b0)!.publish({ event_type: i === 5 ? "sandbox.paused" : "exec.started", sandbox_id: `x${i % 2}`, command: String(i) });
    await Promise.all(hosts.map((h) => h.flush()));
    const got: SandboxEvent[] = [];
    while (got.length < 9) {
      const next = await sub.next();
      if (next.kind !== "event") throw new Error(`feed ended: ${next.kind}`);
      got.push(next.event);
    }
    expect(got.every((e) => e.id > start && e.event_type === "exec.started")).toBe(true);
    expect(got.map((e) => e.id)).toEqual([...got.map((e) => e.id)].sort((x, y) => x - y));
    expect(got.map((e) => e.command).sort()).toEqual(["0", "1", "2", "3", "4", "6", "7", "8", "9"]);
    sub.close();
  }, 30_000);
});
