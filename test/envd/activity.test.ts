// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// locale2b.envd.v1.ActivityService: envd reports processes and file
// transfers, whichever client caused them, with a replayable cursor.
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HandlerContext } from "@connectrpc/connect";
import { ActivityService, WatchActivityRequestSchema, type ActivityEvent, type WatchActivityResponse } from "../../gen/ts/locale2b/envd/v1/activity_pb.js";
import { ActivityLog } from "../../envd/activity/log.js";
import { ACTIVITY_BATCH_MAX, watchActivity } from "../../envd/activity/watch.js";
import { parseDiskstats, parseNetDev } from "../../envd/activity/counters.js";
import { clients, startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { collect, run } from "../helpers/process.js";

let envd: TestEnvd;
beforeAll(async () => {
  envd = await startTestEnvd();
});
afterAll(async () => {
  await envd?.close();
});

function activityClient() {
  return createClient(ActivityService, createConnectTransport({ baseUrl: envd.url, httpVersion: "1.1", useBinaryFormat: true }));
}

/** The first message of a watch: it names the stream and carries no event. */
async function hello(it: AsyncIterator<WatchActivityResponse>): Promise<WatchActivityResponse> {
  const r = await it.next();
  expect(r.done).toBe(false);
  expect(r.value.event).toBeUndefined();
  expect(r.value.events).toEqual([]);
  return r.value;
}

/** Reads a watch until `n` events arrived, however envd batched them. */
async function take(it: AsyncIterator<WatchActivityResponse>, n: number): Promise<ActivityEvent[]> {
  const out: ActivityEvent[] = [];
  while (out.length < n) {
    const r = await it.next();
    if (r.done) break;
    expect(r.value.event).toBeUndefined(); // this envd sends `events` only
    out.push(...r.value.events);
  }
  return out;
}

describe("ActivityLog", () => {
  it("numbers events, keeps a ring, and says how many a late reader missed", () => {
    const log = new ActivityLog(3);
    for (let i = 0; i < 5; i++) log.emit({ case: "fileRead", value: { path: `/f${i}`, bytes: 1n, user: "u" } });
    expect(log.lastSeq).toBe(5);
    const all = log.since(0);
    expect(all.events.map((e) => Number(e.seq))).toEqual([3, 4, 5]);
    expect(all.dropped).toBe(2);
    expect(log.since(3)).toMatchObject({ dropped: 0 });
    expect(log.since(3).events.map((e) => Number(e.seq))).toEqual([4, 5]);
    expect(log.since(5).events).toEqual([]);
  });

  it("a watch sends what happens within its batch window as one message, oldest first", async () => {
    const log = new ActivityLog();
    const abort = new AbortController();
    const ctx = { signal: abort.signal } as HandlerContext;
    const watch = watchActivity(log, create(WatchActivityRequestSchema), ctx, 50);
    expect((await watch.next()).value).toEqual({ streamId: log.streamId });
    const next = watch.next();
    for (let i = 0; i < 3; i++) log.emit({ case: "fileRead", value: { path: `/now${i}`, bytes: 1n, user: "u" } });
    // Emitted after the watch woke up, within its window: in the same message.
    setTimeout(() => log.emit({ case: "fileRead", value: { path: "/soon", bytes: 1n, user: "u" } }), 1);
    const m = (await next).value as WatchActivityResponse; // the log's own ActivityEvent messages
    expect(m.events.map((e) => Number(e.seq))).toEqual([1, 2, 3, 4]);
    expect(m.dropped).toBe(0n);
    abort.abort();
    expect((await watch.next()).done).toBe(true);
  });

  it("a watch replays what is retained at once, in messages of at most ACTIVITY_BATCH_MAX events", async () => {
    const log = new ActivityLog(ACTIVITY_BATCH_MAX + 50);
    const total = ACTIVITY_BATCH_MAX + 60;
    for (let i = 0; i < total; i++) log.emit({ case: "fileRead", value: { path: `/f${i}`, bytes: 1n, user: "u" } });
    const abort = new AbortController();
    // A window far beyond the test's time-out: the replay must not wait for it.
    const watch = watchActivity(log, create(WatchActivityRequestSchema), { signal: abort.signal } as HandlerContext, 3_600_000);
    await watch.next();
    const a = (await watch.next()).value as WatchActivityResponse;
    const b = (await watch.next()).value as WatchActivityResponse;
    expect(a.events.length).toBe(ACTIVITY_BATCH_MAX);
    expect(Number(a.events[0]!.seq)).toBe(11); // the ring kept the last ACTIVITY_BATCH_MAX + 50 of them
    expect(a.dropped).toBe(10n);
    expect(b.events.map((e) => Number(e.seq))).toEqual(Array.from({ length: 50 }, (_, i) => ACTIVITY_BATCH_MAX + 11 + i));
    expect(b.dropped).toBe(0n);
    abort.abort();
    expect((await watch.next()).done).toBe(true);
  });

  it("parses /proc/net/dev without lo and whole disks only from /proc/diskstats", () => {
    const netDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0
  eth0: 2000      20    0    0    0     0          0         0     3000      30    0    0    0     0       0          0
`;
    expect(parseNetDev(netDev)).toEqual({ rx: 2000, tx: 3000 });
    const disk = ` 254       0 vda 100 0 8 0 50 0 16 0 0 0 0
 254       1 vda1 100 0 8 0 50 0 16 0 0 0 0
   7       0 loop0 5 0 99 0 0 0 0 0 0 0 0`;
    expect(parseDiskstats(disk)).toEqual({ read: 8 * 512, write: 16 * 512 });
  });
});

describe("WatchActivity", () => {
  it("reports a process's start and end with its command, tag and exit code, and a failed start", async () => {
    const watch = activityClient().watchActivity({})[Symbol.asyncIterator]();
    expect((await hello(watch)).streamId).toMatch(/^[0-9a-f]{16}$/);

    const { process } = clients(envd.url);
    await collect(process.start({ process: { cmd: "/bin/bash", args: ["-l", "-c", "exit 3"] }, tag: "activity-test", stdin: false }));
    await expect(collect(process.start({ process: { cmd: "/bin/bash", args: ["-c", "true"], cwd: "/no/such/dir" } }))).rejects.toThrow(/does not exist/);
    const events = await take(watch, 3);
    await watch.return?.();
    const [started, ended, failed] = events.map((e) => e.event);
    expect(started).toMatchObject({ case: "processStarted", value: { cmd: "/bin/bash", tag: "activity-test" } });
    expect(started!.value).toHaveProperty("args", ["-l", "-c", "exit 3"]);
    expect(ended).toMatchObject({ case: "processEnded", value: { tag: "activity-test", exitCode: 3, exited: true } });
    expect((ended!.value as { pid: number }).pid).toBe((started!.value as { pid: number }).pid);
    expect(failed).toMatchObject({ case: "processFailed", value: { cmd: "/bin/bash" } });
    expect((failed!.value as { error: string }).error).toMatch(/cwd '\/no\/such\/dir' does not exist/);
    const seqs = events.map((e) => Number(e.seq));
    expect(seqs[1]).toBe(seqs[0]! + 1);
  });

  it("replays what happened while nobody watched, from the cursor on", async () => {
    const client = activityClient();
    const first = client.watchActivity({})[Symbol.asyncIterator]();
    const { streamId } = await hello(first);
    await first.return?.();
    const { process } = clients(envd.url);
    await run(process, "echo unwatched", { tag: "while-away" });
    // A cursor from another stream id means "from the start of what is retained".
    const again = client.watchActivity({ streamId, afterSeq: 0n })[Symbol.asyncIterator]();
    await hello(again);
    const seen = await take(again, 1);
    await again.return?.();
    expect(seen.some((e) => e.event.case === "processStarted")).toBe(true);
  });

  it("reports /files downloads and uploads with the resolved path and size", async () => {
    const watch = activityClient().watchActivity({ streamId: "", afterSeq: 0n })[Symbol.asyncIterator]();
    await hello(watch);
    // Skip what earlier tests left in the ring.
    const path = join(envd.dir, "a.txt");
    const up = await fetch(`${envd.url}/files?path=${encodeURIComponent(path)}`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream" },
      body: "hello world",
    });
    expect(up.status).toBe(200);
    writeFileSync(join(envd.dir, "b.bin"), Buffer.alloc(1234));
    const down = await fetch(`${envd.url}/files?path=${encodeURIComponent(join(envd.dir, "b.bin"))}`);
    expect((await down.arrayBuffer()).byteLength).toBe(1234);
    const missing = await fetch(`${envd.url}/files?path=${encodeURIComponent(join(envd.dir, "nope"))}`);
    expect(missing.status).toBe(404);
    const files: unknown[] = [];
    while (files.length < 2) {
      for (const { event: e } of await take(watch, 1)) if (e.case === "fileRead" || e.case === "fileWritten") files.push(e);
    }
    await watch.return?.();
    expect(files).toEqual([
      expect.objectContaining({ case: "fileWritten", value: expect.objectContaining({ path, bytes: 11n }) }),
      expect.objectContaining({ case: "fileRead", value: expect.objectContaining({ path: join(envd.dir, "b.bin"), bytes: 1234n }) }),
    ]);
  });

  it("GetCounters answers the kernel's boot id and network namespace", async () => {
    const c = await activityClient().getCounters({});
    expect(c.bootId).toMatch(/^[0-9a-f-]{36}$/);
    expect(c.netNamespace).toMatch(/^net:\[\d+\]$/);
    expect(c.netRxBytes).toBeGreaterThanOrEqual(0n);
  });
});
