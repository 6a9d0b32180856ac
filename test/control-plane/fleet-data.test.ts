// The fleet's shared data through its API replicas (test/helpers/fleet.ts: a
// real Postgres, two nodes, two replicas): the workspace API, and the activity
// history every node writes to Postgres (events paged, streamed and resumed
// through either replica, on SSE and Connect; audit); volumes on their node;
// secrets in the shared store; a template built on one node used on the
// other. Routing and faults: fleet.test.ts.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { Sandbox, Secret, SecretNotFoundError, Template, Volume } from "e2b";
import pgLib from "pg";
import { describe, expect, it } from "vitest";
import { PRUNE_LOCK } from "../../control-plane/store/pg-activity-history.js";
import { runCli, type Served } from "../helpers/cli.js";
import { apiClient, rejection, watch } from "../helpers/connect-api.js";
import { fleetMissing, useTestFleet } from "../helpers/fleet.js";
import { waitForValue } from "../helpers/wait.js";


const missing = fleetMissing();
if (missing) console.warn(`fleet-data.test.ts: skipping: ${missing}`);

describe.skipIf(missing !== undefined)("a fleet's shared data through its replicas: workspace API, activity history, volumes, secrets, templates", () => {
  const f = useTestFleet();
  const opts = (api: Served) => f.opts(api);
  const nodeOf = (id: string) => f.nodeOf(id);

  it("the workspace API through the replicas: a workspace finds its sandbox through either, exec and files on its node, lists; events (paged, streamed, resumed) and audit of both nodes from Postgres", async () => {
    const ws = async (api: Served, method: string, path: string, body?: unknown) => {
      const r = await fetch(`${api.url}/workspace${path}`, { method, headers: { "x-api-key": f.key, ...(body ? { "content-type": "application/json" } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}) });
      const text = await r.text();
      return { status: r.status, json: (text && r.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : text) as Record<string, unknown> & string };
    };
    expect((await ws(f.api1, "GET", "/health")).json).toMatchObject({ status: "ok", runtime: "fleet", nodes: ["n1", "n2"] });
    const made = await ws(f.api1, "POST", "/sandboxes", { workspace_id: "fleet-ws-1" });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = made.json.sandbox_id as string;
    const other = await ws(f.api2, "POST", "/sandboxes", { workspace_id: "fleet-ws-2" });
    expect(new Set([await nodeOf(id), await nodeOf(other.json.sandbox_id as string)])).toEqual(new Set(["n1", "n2"]));
    // The same workspace through the other replica: the same sandbox.
    expect((await ws(f.api2, "POST", "/sandboxes", { workspace_id: "fleet-ws-1" })).json.sandbox_id).toBe(id);
    expect((await ws(f.api2, "POST", `/sandboxes/${id}/files/write`, { path: "/workspace/note.txt", content: "kept" })).status).toBe(200);
    const ran = await ws(f.api1, "POST", `/sandboxes/${id}/exec`, { command: "cat /workspace/note.txt; echo; echo $((6*7))" });
    expect(ran.json).toMatchObject({ stdout: "kept\n42\n", exit_code: 0 });
    const listed = (await ws(f.api2, "GET", "/sandboxes")).json.sandboxes as { sandbox_id: string }[];
    expect(listed.map((x) => x.sandbox_id)).toEqual(expect.arrayContaining([id, other.json.sandbox_id]));
    const otherId = other.json.sandbox_id as string;
    // Both nodes write their events to Postgres a moment (a batch) after the exec answers: read until they are there.
    type Ev = { id: number; event_type: string; sandbox_id: string; command?: string };
    const events = await waitForValue("the exec in the sandbox's events", async () => {
      const got = (await ws(f.api2, "GET", `/events?sandbox_id=${id}`)).json.events as Ev[];
      return got.some((e) => e.event_type === "exec.started") ? got : undefined;
    });
    expect(events.map((e) => e.event_type)).toEqual(expect.arrayContaining(["sandbox.created", "exec.started"]));
    // Without sandbox_id: the whole fleet's events, one numbering, in order, paged by id.
    const fleetWide = (await ws(f.api1, "GET", "/events?limit=10000")).json.events as Ev[];
    const ids = fleetWide.map((e) => e.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);
    for (const sid of [id, otherId]) expect(fleetWide.some((e) => e.sandbox_id === sid && e.event_type === "sandbox.created")).toBe(true);
    const paged = await ws(f.api2, "GET", `/events?since_id=${ids[1]}&limit=2`);
    expect((paged.json.events as Ev[]).map((e) => e.id)).toEqual(ids.slice(2, 4));
    expect(paged.json.next_since_id).toBe(ids[3]);
    // Bad ids and times: 400, saying what is wrong.
    for (const [path, message] of [
      ["/events?since_id=abc", /since_id must be an event id/],
      ["/events?limit=0", /limit must be from 1 to 10000/],
      ["/events?since=yesterday", /query 'since' must be unix seconds or an ISO 8601 time/],
      ["/audit?since=later", /query 'since' must be unix seconds or an ISO 8601 time/],
      ["/audit?format=xml", /format must be jsonl/],
      ["/events?event_type=exec.nope", /unknown event type 'exec.nope'/],
    ] as const) {
      const bad = await ws(f.api1, "GET", path);
      expect(bad.status, path).toBe(400);
      expect(bad.json.message, path).toMatch(message);
    }
    const badResume = await fetch(`${f.api1.url}/workspace/events/stream`, { headers: { "x-api-key": f.key, "last-event-id": "nope" } });
    expect(badResume.status).toBe(400);
    expect(((await badResume.json()) as { message: string }).message).toMatch(/since_id \(or Last-Event-ID\) must be an event id/);

    // The fleet's event stream: both nodes' exec events on one stream, with their ids.
    type Sse = { id: number; event: string; data: Ev & { last_id?: number } };
    const openStream = async (api: Served, lastEventId?: number) => {
      const ac = new AbortController();
      const res = await fetch(`${api.url}/workspace/events/stream?event_type=exec.completed`, { headers: { "x-api-key": f.key, ...(lastEventId !== undefined ? { "last-event-id": String(lastEventId) } : {}) }, signal: ac.signal });
      expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
      const reader = res.body!.getReader();
      const got: Sse[] = [];
      let buf = "";
      const next = async (pred: (e: Sse) => boolean): Promise<Sse> => {
        for (;;) {
          const found = got.findIndex(pred);
          if (found >= 0) return got.splice(found, 1)[0]!;
          const { value, done } = await reader.read();
          if (done) throw new Error("the event stream ended");
          buf += Buffer.from(value).toString("utf8");
          let end: number;
          while ((end = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, end).split("\n");
            buf = buf.slice(end + 2);
            const field = (k: string) => block.find((l) => l.startsWith(`${k}: `))?.slice(k.length + 2);
            if (field("event")) got.push({ id: Number(field("id") ?? NaN), event: field("event")!, data: JSON.parse(field("data") ?? "null") as Sse["data"] });
          }
        }
      };
      return { next, close: () => ac.abort() };
    };
    const live = await openStream(f.api1);
    const hello = await live.next((e) => e.event === "subscribed");
    for (const sid of [id, otherId]) await ws(f.api2, "POST", `/sandboxes/${sid}/exec`, { command: "echo live" });
    const seen = [await live.next((e) => e.event === "exec.completed"), await live.next((e) => e.event === "exec.completed")];
    expect(seen.map((e) => e.data.sandbox_id).sort()).toEqual([id, otherId].sort());
    for (const e of seen) {
      expect(e.id).toBe(e.data.id);
      expect(e.id).toBeGreaterThan(hello.data.last_id!);
    }
    expect(seen[1]!.id).toBeGreaterThan(seen[0]!.id);
    live.close();
    // Disconnected: more happens on both nodes. Resumed through the other replica with Last-Event-ID: exactly what was missed.
    for (const sid of [id, otherId]) for (const n of [1, 2]) await ws(f.api1, "POST", `/sandboxes/${sid}/exec`, { command: `echo missed-${n}` });
    const resumed = await openStream(f.api2, seen[1]!.id);
    await resumed.next((e) => e.event === "subscribed");
    const replayed: Sse[] = [];
    while (replayed.length < 4) replayed.push(await resumed.next((e) => e.event === "exec.completed"));
    resumed.close();
    expect(replayed.map((e) => e.id)).toEqual([...replayed.map((e) => e.id)].sort((a, b) => a - b));
    expect(replayed.every((e) => e.id > seen[1]!.id)).toBe(true);
    expect(replayed.map((e) => `${e.data.sandbox_id} ${e.data.command}`).sort()).toEqual(
      [id, otherId].flatMap((sid) => [1, 2].map((n) => `${sid} echo missed-${n}`)).sort(),
    );
    // The same events as a page from Postgres, none missing between.
    const between = (await ws(f.api1, "GET", `/events?since_id=${seen[1]!.id}&event_type=exec.completed`)).json.events as Ev[];
    expect(between.map((e) => e.id)).toEqual(replayed.map((e) => e.id));

    // The Connect API's WatchSandboxEvents the same way: fleet ids from Postgres, resumed through the other replica.
    const watchVia = (api: Served, k = f.key) => apiClient(api.url, "connect-json", { "x-api-key": k });
    const connected = await watch(watchVia(f.api1), { eventTypes: ["exec.completed"] });
    for (const sid of [id, otherId]) await ws(f.api2, "POST", `/sandboxes/${sid}/exec`, { command: "echo connect-live" });
    const got = [await connected.next(), await connected.next()];
    connected.close();
    expect(got.map((e) => e.sandboxId).sort()).toEqual([id, otherId].sort());
    expect(got.every((e) => e.id > connected.subscribed.id)).toBe(true);
    for (const sid of [id, otherId]) await ws(f.api1, "POST", `/sandboxes/${sid}/exec`, { command: "echo connect-missed" });
    const again = await watch(watchVia(f.api2), { eventTypes: ["exec.completed"], afterId: got[1]!.id });
    const missed = [await again.next(), await again.next()];
    again.close();
    expect(missed.map((e) => `${e.sandboxId} ${e.activity?.command}`).sort()).toEqual([id, otherId].map((sid) => `${sid} echo connect-missed`).sort());
    expect(missed[1]!.id).toBeGreaterThan(missed[0]!.id);
    expect(missed[0]!.id).toBeGreaterThan(got[1]!.id);
    // Answered by the replica, not a node: it checks the key itself.
    expect((await rejection(watch(watchVia(f.api1, "e2b_" + "0".repeat(40)), { afterId: 1n }))).code).toBe(Code.Unauthenticated);

    // Both nodes' audit entries in one export from Postgres, one numbering (entries are written in batches: read until both are there).
    const audit = await waitForValue("both nodes' audit entries", async () => {
      const text = (await ws(f.api1, "GET", "/audit")).json as string;
      return text.includes(id) && text.includes(otherId) ? text : undefined;
    });
    const entries = audit.trim().split("\n").map((l) => JSON.parse(l) as { id: number; sandbox_id?: string; action: string });
    expect(entries.map((e) => e.id)).toEqual([...entries.map((e) => e.id)].sort((a, b) => a - b));
    for (const sid of [id, otherId]) expect(entries.some((e) => e.sandbox_id === sid && e.action === "POST /sandboxes")).toBe(true);
    const one = ((await ws(f.api2, "GET", `/audit?sandbox_id=${otherId}&format=csv`)).json as string).trim().split("\n");
    expect(one[0]).toMatch(/^id,time,actor/);
    expect(one.slice(1).every((l) => l.includes(otherId))).toBe(true);
    for (const sid of [id, otherId]) expect((await ws(f.api2, "DELETE", `/sandboxes/${sid}`)).status).toBe(200);
    expect((await ws(f.api1, "GET", `/sandboxes/${id}`)).status).toBe(404);
  }, 300_000);

  it("volumes through the replicas: made on a node, its file API and the sandboxes that mount it go there", async () => {
    const saved = { ...process.env };
    Object.assign(process.env, { E2B_API_KEY: f.key, E2B_API_URL: f.api2.url, E2B_SANDBOX_URL: f.api2.url, E2B_VOLUME_API_URL: f.api1.url });
    try {
      const vol = await Volume.create("fleet-vol");
      const home = (await f.store.getVolume(vol.volumeId))?.node;
      expect(["n1", "n2"]).toContain(home);
      await vol.writeFile("/from-api.txt", "written through a replica");
      const sbx = await Sandbox.create("base", { volumeMounts: { "/mnt/data": vol }, timeoutMs: 120_000 });
      expect(await nodeOf(sbx.sandboxId)).toBe(home); // placed where the volume's disk is
      expect((await sbx.commands.run("cat /mnt/data/from-api.txt; echo ok > /mnt/data/back.txt")).stdout).toBe("written through a replica");
      expect(await (await Volume.connect(vol.volumeId)).readFile("/back.txt")).toBe("ok\n");
      expect((await Volume.list()).map((v) => v.name)).toContain("fleet-vol");
      await sbx.kill();
      expect(await Volume.destroy(vol.volumeId)).toBe(true);
      expect(await f.store.getVolume(vol.volumeId)).toBeUndefined();
    } finally {
      for (const k of ["E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"]) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
  }, 180_000);

  it("secrets through either replica, from the shared store: made through one, read, updated, listed and deleted through the other; sealed in Postgres", async () => {
    const value = `fleet-canary-${randomBytes(8).toString("hex")}`;
    const s = await Secret.create("fleet-secret", value, opts(f.api1));
    expect((await Secret.getInfo("FLEET-SECRET", opts(f.api2))).secretId).toBe(s.secretId);
    expect((await Secret.update(s.secretId, `${value}-2`, opts(f.api2))).version).toBe(2);
    expect((await Secret.list(opts(f.api1)).nextItems()).map((x) => [x.name, x.version])).toEqual([["fleet-secret", 2]]);
    const c = new pgLib.Client({ connectionString: f.db });
    await c.connect();
    try {
      const dump = JSON.stringify((await c.query("SELECT s.*, v.* FROM secrets s JOIN secret_versions v ON v.secret_id = s.id")).rows);
      expect(dump).toContain(s.secretId);
      expect(dump).not.toContain(value);
    } finally {
      await c.end();
    }
    expect(await Secret.destroy("fleet-secret", opts(f.api2))).toBe(true);
    await expect(Secret.getInfo(s.secretId, opts(f.api1))).rejects.toBeInstanceOf(SecretNotFoundError);
  });

  it("a template built with the Template SDK through a replica runs on the other node too: its image is copied there on demand", async () => {
    const t = Template().fromTemplate("base").runCmd("echo built-in-the-fleet > /home/user/marker.txt");
    const built = await Template.build(t, "fleet-tpl", { apiKey: f.key, apiUrl: f.api2.url, onBuildLogs: () => undefined });
    const image = `@${built.buildId}`;
    const holders = async () => (await f.store.listNodes()).filter((n) => n.images.includes(image)).map((n) => n.name);
    const builtOn = await waitForValue("the build in a heartbeat", async () => ((await holders()).length ? holders() : undefined), { timeoutMs: 20_000, everyMs: 500 });
    expect(builtOn).toEqual(["n1"]); // the replicas send template builds to the first ready node
    // Only n2 takes creates now: it copies the image from n1, then boots it.
    await runCli(["nodes", "cordon", "n1"], { LOCALE2B_DATABASE_URL: f.db });
    try {
      const sbx = await Sandbox.create("fleet-tpl", { ...opts(f.api1), timeoutMs: 120_000 });
      expect(await nodeOf(sbx.sandboxId)).toBe("n2");
      expect((await sbx.commands.run("cat /home/user/marker.txt")).stdout).toBe("built-in-the-fleet\n");
      await sbx.kill();
      expect(existsSync(join(f.n2Images, "templates", `${image}.current`))).toBe(true);
      await waitForValue("the copy in n2's heartbeat", async () => ((await holders()).length === 2 ? true : undefined), { timeoutMs: 20_000, everyMs: 500 });
    } finally {
      await runCli(["nodes", "uncordon", "n1"], { LOCALE2B_DATABASE_URL: f.db });
    }
    // Deleted through a replica: gone for creates everywhere.
    expect((await fetch(`${f.api1.url}/templates/${built.templateId}`, { method: "DELETE", headers: { "x-api-key": f.key } })).status).toBe(204);
    const gone = await fetch(`${f.api1.url}/sandboxes`, { method: "POST", headers: { "x-api-key": f.key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "fleet-tpl" }) });
    expect(gone.status).toBe(404);
  }, 600_000);

  it("the replicas prune the shared history with their retention, one at a time (an advisory lock); nodes leave it alone", async () => {
    const client = new pgLib.Client({ connectionString: f.db });
    await client.connect();
    const sid = `retention-${randomBytes(4).toString("hex")}`;
    const HOUR = 3_600_000;
    const now = Date.now();
    try {
      // Older than an hour (pruned with 1 h / 1 day) and younger (kept); all younger than the defaults (24 h, 30 days).
      await client.query("INSERT INTO events (time, type, sandbox_id, body) VALUES ($1, 'sandbox.created', $3, '{}'), ($2, 'sandbox.created', $3, '{}')", [now - 3 * HOUR, now - HOUR / 6, sid]);
      await client.query("INSERT INTO audit (time, actor, api, action, sandbox_id, result, body) VALUES ($1, 'test', 'e2b', 'x', $3, 'ok', '{}'), ($2, 'test', 'e2b', 'x', $3, 'ok', '{}')", [now - 2 * 24 * HOUR, now - HOUR, sid]);
      await client.query("INSERT INTO metric_samples (sandbox_id, time, body) VALUES ($1, $2, '{}'), ($1, $3, '{}')", [sid, now - 3 * HOUR, now - HOUR / 6]);
      const left = async () => {
        const q = async (table: string) => (await client.query<{ time: string }>(`SELECT time FROM ${table} WHERE sandbox_id = $1 ORDER BY time`, [sid])).rows.map((r) => Number(r.time));
        return { events: await q("events"), audit: await q("audit"), samples: await q("metric_samples") };
      };
      const all = await left();
      expect([all.events.length, all.audit.length, all.samples.length]).toEqual([2, 2, 2]);
      const short = ["--event-retention-hours", "1", "--audit-retention-days", "1", "--metrics-retention-hours", "1"];

      // A node given the short retention does not prune the shared history (it would at its start).
      const n3 = await f.startNode("n3", short);
      await n3.stop();
      await runCli(["nodes", "remove", "n3"], { LOCALE2B_DATABASE_URL: f.db });
      expect(await left()).toEqual(all);

      // A replica prunes before it listens: while another holds the lock it skips, and the rows stay.
      await client.query("SELECT pg_advisory_lock($1)", [PRUNE_LOCK]);
      const skipped = await f.startApi(short);
      await skipped.stop();
      expect(await left()).toEqual(all);
      await client.query("SELECT pg_advisory_unlock($1)", [PRUNE_LOCK]);

      const pruning = await f.startApi(short);
      await pruning.stop();
      expect(await left()).toEqual({ events: [now - HOUR / 6], audit: [now - HOUR], samples: [now - HOUR / 6] });
    } finally {
      await client.query("DELETE FROM events WHERE sandbox_id = $1", [sid]);
      await client.query("DELETE FROM audit WHERE sandbox_id = $1", [sid]);
      await client.query("DELETE FROM metric_samples WHERE sandbox_id = $1", [sid]);
      await client.end();
    }
  }, 120_000);

  it("places by vCPUs too: a node's --cpu-budget, in its heartbeat, keeps creates off it once its sandboxes' vCPUs fill it (429 when the fleet is full)", async () => {
    const n3 = await f.startNode("n3", ["--cpu-budget", "3"]);
    const create = (api: Served) =>
      fetch(`${api.url}/sandboxes`, { method: "POST", headers: { "x-api-key": f.key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "base", timeout: 120 }) });
    const made: string[] = [];
    try {
      const listed = await waitForValue("n3's heartbeat with its CPU budget", async () => {
        const nodes = JSON.parse((await runCli(["nodes", "list", "--json"], { LOCALE2B_DATABASE_URL: f.db })).stdout) as { name: string; status: string; capacity: { cpuBudget?: number; cpus?: number } }[];
        const n = nodes.find((x) => x.name === "n3");
        return n?.status === "ready" ? nodes : undefined;
      }, { timeoutMs: 20_000, everyMs: 250 });
      expect(listed.find((n) => n.name === "n3")!.capacity).toMatchObject({ cpuBudget: 3, cpus: 0 });
      expect(listed.find((n) => n.name === "n1")!.capacity.cpuBudget).toBeGreaterThanOrEqual(256); // the default
      const table = (await runCli(["nodes", "list"], { LOCALE2B_DATABASE_URL: f.db })).stdout;
      expect(table).toMatch(/^NAME +STATUS +URL +RUNTIME +SANDBOXES +MEMORY MiB +VCPUS +HEARTBEAT/);
      expect(table).toMatch(/\nn3 +ready .* 0\/3 /);
      // Only n3 takes creates: a base sandbox (2 vCPUs) fits its 3, a second does not.
      await runCli(["nodes", "cordon", "n1"], { LOCALE2B_DATABASE_URL: f.db });
      await runCli(["nodes", "cordon", "n2"], { LOCALE2B_DATABASE_URL: f.db });
      const first = await create(f.api1);
      expect(first.status, await first.clone().text()).toBe(201);
      const id = ((await first.json()) as { sandboxID: string }).sandboxID;
      made.push(id);
      expect(await nodeOf(id)).toBe("n3");
      const second = await create(f.api2);
      expect(second.status).toBe(429);
      expect(second.headers.get("retry-after")).toBe("5");
      expect(((await second.json()) as { message: string }).message).toMatch(/the fleet is full: 1 node could take this sandbox and none has room for one more sandbox of 512 MiB and 2 vCPUs/);
    } finally {
      for (const id of made) await fetch(`${f.api1.url}/sandboxes/${id}`, { method: "DELETE", headers: { "x-api-key": f.key } });
      await runCli(["nodes", "uncordon", "n1"], { LOCALE2B_DATABASE_URL: f.db });
      await runCli(["nodes", "uncordon", "n2"], { LOCALE2B_DATABASE_URL: f.db });
      await n3.stop();
      await runCli(["nodes", "remove", "n3"], { LOCALE2B_DATABASE_URL: f.db });
    }
  }, 180_000);
});
