// A fleet on one machine: a real Postgres, two `locale2b node` processes (the
// process runtime) and two `locale2b api` replicas, driven with the real E2B
// SDK through the replicas only. Creates spread over both nodes; any replica
// serves any sandbox (commands, files, signed URLs, user ports); lists merge
// and page across nodes; nodes answer only the replicas, and the node token
// never reaches a sandbox; cordon, a node restart (re-adoption) and a lost
// node behave as docs/fleet.md says.
import { randomBytes } from "node:crypto";
import http from "node:http";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CommandExitError, Sandbox, Secret, SecretNotFoundError, Template, Volume } from "e2b";
import pgLib from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PgStore } from "../../control-plane/store/pg-store.js";
import { NODE_LOST_MS } from "../../control-plane/domain/node.js";
import { Code } from "@connectrpc/connect";
import { runCli, startCli, type Served } from "../helpers/cli.js";
import { apiClient, rejection, watch } from "../helpers/connect-api.js";
import { ownImagesDir } from "../helpers/fleet-images.js";
import { postgresMissing, startPostgres, type TestPostgres } from "../helpers/postgres.js";

const missing = postgresMissing() ?? (process.getuid?.() !== 0 ? "the process runtime's sandboxes need root" : undefined);
if (missing) console.warn(`fleet.test.ts: skipping: ${missing}`);

const TOKEN = randomBytes(32).toString("hex");
/** Every replica and node has the same secrets key. */
const SECRETS_KEY = randomBytes(32).toString("base64");

/** A request with a Host of our choosing (getHost's `<port>-<id>.<domain>`), as a browser on wildcard DNS sends it. */
function get(base: string, host: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { headers: { host, ...headers } }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode!, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** fn's first defined answer, tried every `everyMs`; the last error says why it never came. */
async function until<T>(what: string, fn: () => Promise<T | undefined>, tries = 120, everyMs = 250): Promise<T> {
  let last: unknown;
  for (let i = 0; i < tries; i++) {
    const v = await fn().catch((err: unknown) => void (last = err));
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`gave up waiting for ${what}: ${String(last)}`);
}

describe.skipIf(missing !== undefined)("a fleet: two nodes, two API replicas, one Postgres", () => {
  let pg: TestPostgres;
  let db: string;
  let store: PgStore;
  const dirs: string[] = [];
  const procs: Served[] = [];
  let api1: Served;
  let api2: Served;
  let key: string;
  const nodeDirs: Record<string, string> = {};
  const nodes: Record<string, Served> = {};
  const env = () => ({ LOCALE2B_DATABASE_URL: db, LOCALE2B_NODE_TOKEN: TOKEN, LOCALE2B_NO_IMAGE_BUILD: "1", LOCALE2B_SECRETS_KEY: SECRETS_KEY });
  let n2Images: string;
  const startApi = async () => {
    const s = await startCli(["api", "--port", "0", "--host", "127.0.0.1"], env(), /E2B_API_URL=(\S+)\n[^]*E2B_API_KEY=[^\n]*\n/);
    procs.push(s);
    return s;
  };
  const startNode = async (name: string) => {
    nodeDirs[name] ??= mkdtempSync(join(tmpdir(), `locale2b-fleet-${name}-`));
    dirs.push(nodeDirs[name]!);
    const s = await startCli(
      ["node", "--port", "0", "--host", "127.0.0.1", "--data-dir", nodeDirs[name]!, "--node-name", name, "--warm-pool", "0", "--domain", `localhost:${new URL(api1.url).port}`],
      { ...env(), ...(name === "n2" ? { LOCALE2B_IMAGES_DIR: n2Images } : {}) },
      /reach it at (http:\/\/\S+);/,
    );
    procs.push(s);
    nodes[name] = s;
    return s;
  };
  const opts = (api: Served) => ({ apiKey: key, apiUrl: api.url, sandboxUrl: api.url });
  const nodeOf = async (id: string) => (await store.getSandbox(id))?.node;

  beforeAll(async () => {
    pg = await startPostgres();
    db = await pg.database();
    api1 = await startApi();
    key = /export E2B_API_KEY=(e2b_[0-9a-f]{40})/.exec(api1.banner)![1]!;
    api2 = await startApi();
    n2Images = ownImagesDir(process.env.LOCALE2B_IMAGES_DIR!);
    dirs.push(n2Images);
    expect(api2.banner).not.toMatch(/E2B_API_KEY=e2b_/); // one key, made by the first replica
    await startNode("n1");
    await startNode("n2");
    store = await PgStore.open(db, { max: 2 });
  }, 120_000);

  afterAll(async () => {
    for (const s of procs) if (s.child.exitCode === null && s.child.signalCode === null) await s.stop();
    await store?.close();
    await pg?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it("nodes answer only the API replicas: no token, a wrong token, or the client's own token header get 401 and nothing else", async () => {
    const n1 = nodes.n1!.url;
    const tries: Record<string, string>[] = [{ "x-api-key": key }, { "x-api-key": key, "x-locale2b-node-token": "x".repeat(64) }];
    for (const headers of tries) {
      const r = await fetch(`${n1}/v2/sandboxes`, { headers });
      expect(r.status).toBe(401);
      expect(((await r.json()) as { message: string }).message).toMatch(/fleet node: it serves only the fleet's API replicas/);
    }
    expect((await fetch(`${n1}/health`)).status).toBe(200);
    const listed = await runCli(["nodes", "list", "--json"], { LOCALE2B_DATABASE_URL: db });
    expect(listed.code, listed.stderr).toBe(0);
    const fleet = JSON.parse(listed.stdout) as { name: string; status: string; url: string }[];
    expect(fleet.map((n) => [n.name, n.status])).toEqual([
      ["n1", "ready"],
      ["n2", "ready"],
    ]);
    expect(fleet[0]!.url).toBe(nodes.n1!.url);
  });

  it("the fleet commands say what is missing: the Postgres, the node token, a long enough token, a known node", async () => {
    const noDb = await runCli(["node", "--port", "0"], { LOCALE2B_NODE_TOKEN: TOKEN });
    expect([noDb.code, noDb.stderr]).toEqual([2, expect.stringMatching(/locale2b node needs the fleet's Postgres: --database-url or LOCALE2B_DATABASE_URL/)]);
    const noToken = await runCli(["api", "--port", "0"], { LOCALE2B_DATABASE_URL: db });
    expect([noToken.code, noToken.stderr]).toEqual([2, expect.stringMatching(/locale2b api needs LOCALE2B_NODE_TOKEN, the fleet's shared secret/)]);
    const short = await runCli(["node", "--port", "0"], { LOCALE2B_DATABASE_URL: db, LOCALE2B_NODE_TOKEN: "hunter2" });
    expect([short.code, short.stderr]).toEqual([2, expect.stringMatching(/LOCALE2B_NODE_TOKEN is 7 characters: use at least 32/)]);
    const badUrl = await runCli(["node", "--advertise-url", "ftp://x"], { LOCALE2B_DATABASE_URL: db, LOCALE2B_NODE_TOKEN: TOKEN });
    expect(badUrl.stderr).toMatch(/--advertise-url 'ftp:\/\/x' must be http:\/\/host:port/);
    const unknown = await runCli(["nodes", "cordon", "nope"], { LOCALE2B_DATABASE_URL: db });
    expect([unknown.code, unknown.stderr]).toEqual([1, expect.stringMatching(/no node 'nope' in this fleet/)]);
  });

  it("creates spread over both nodes, and any replica serves any sandbox: commands, files, signed URLs, user ports, lists", async () => {
    const made = await Promise.all([0, 1, 2, 3].map((i) => Sandbox.create("base", { ...opts(i % 2 ? api2 : api1), timeoutMs: 300_000, metadata: { i: String(i) }, secure: true })));
    const where = await Promise.all(made.map((s) => nodeOf(s.sandboxId)));
    expect(new Set(where)).toEqual(new Set(["n1", "n2"]));

    for (const s of made) {
      // Through the other replica than the one that created it.
      const other = await Sandbox.connect(s.sandboxId, opts(Number(s.sandboxId.length) % 2 ? api1 : api2));
      const chunks: string[] = [];
      const r = await other.commands.run("for i in 1 2 3; do echo line $i; sleep 0.2; done; hostname", { onStdout: (d) => void chunks.push(d) });
      expect(r.stdout).toMatch(/^line 1\nline 2\nline 3\n/);
      expect(chunks.length).toBeGreaterThanOrEqual(2); // streamed, not buffered at either hop
      await other.files.write("/home/user/where.txt", `on ${await nodeOf(s.sandboxId)}`);
      const back = await Sandbox.connect(s.sandboxId, opts(api1));
      expect(await back.files.read("/home/user/where.txt")).toBe(`on ${await nodeOf(s.sandboxId)}`);
      await expect(back.commands.run("exit 3")).rejects.toBeInstanceOf(CommandExitError);
    }

    // From inside a sandbox, as user and as root, a node's port and the API's are out of reach (and a node would want its token).
    const gw = /default via (\S+)/.exec((await made[0]!.commands.run("ip route show default")).stdout)?.[1];
    expect(gw).toBeDefined();
    const ports = [nodes.n1!.url, nodes.n2!.url, api1.url].map((u) => new URL(u).port);
    const probe = `import urllib.request
for host in ["${gw}", "127.0.0.1"]:
    for port in [${ports.join(", ")}]:
        try:
            r = urllib.request.urlopen(f"http://{host}:{port}/v2/sandboxes", timeout=3); print("REACHED", host, port, r.status)
        except urllib.error.HTTPError as e:
            print("REACHED", host, port, e.code)
        except OSError as e:
            print("refused", host, port)`;
    for (const user of ["user", "root"] as const) {
      await made[0]!.files.write("/tmp/probe.py", probe, { user });
      const r = await made[0]!.commands.run("python3 /tmp/probe.py", { user });
      expect(r.stdout, user).not.toMatch(/REACHED/);
      expect(r.stdout.match(/refused/g)?.length, r.stdout).toBe(6);
    }

    // A signed download URL (secure sandbox) works through either replica with no key; a forged one does not.
    const s0 = made[0]!;
    const url = new URL(await s0.downloadUrl("/home/user/where.txt", { useSignatureExpiration: 60_000 }));
    for (const api of [api1, api2]) {
      const r = await fetch(`${api.url}${url.pathname}${url.search}`);
      expect(r.status, await r.clone().text()).toBe(200);
      expect(await r.text()).toMatch(/^on n[12]$/);
    }
    url.searchParams.set("signature", "v1_" + "A".repeat(43));
    expect((await fetch(`${api1.url}${url.pathname}${url.search}`)).status).toBe(401);

    // A user port by Host (getHost), through both replicas; the node token never reaches the sandbox's server.
    const s1 = made[1]!;
    await s1.commands.run(
      `cat > /tmp/echo.py <<'EOF'
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(dict(self.headers)).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8123), H).serve_forever()
EOF`,
    );
    await s1.commands.run("python3 /tmp/echo.py", { background: true });
    const host = s1.getHost(8123);
    expect(host).toBe(`8123-${s1.sandboxId}.localhost:${new URL(api1.url).port}`);
    for (const api of [api1, api2]) {
      const r = await until("the sandbox's server", async () => {
        const got = await get(api.url, host, "/", { "x-locale2b-node-token": TOKEN });
        if (got.status !== 200) throw new Error(`${got.status}: ${got.body}`);
        return got;
      });
      const seen = JSON.parse(r.body) as Record<string, string>;
      expect(Object.keys(seen).map((k) => k.toLowerCase())).not.toContain("x-locale2b-node-token");
      expect(r.body).not.toContain(TOKEN);
    }

    // The list is every node's, merged, and pages across nodes.
    for (const api of [api1, api2]) {
      const all = await Sandbox.list({ ...opts(api) }).nextItems();
      expect(new Set(all.map((s) => s.sandboxId))).toEqual(new Set(made.map((s) => s.sandboxId)));
      const pager = Sandbox.list({ ...opts(api), limit: 3 });
      const first = await pager.nextItems();
      expect(first.length).toBe(3);
      expect(pager.hasNext).toBe(true);
      const second = await pager.nextItems();
      expect(second.length).toBe(1);
      expect(new Set([...first, ...second].map((s) => s.sandboxId)).size).toBe(4);
    }

    // Kill through the other replica: gone everywhere.
    for (const s of made) await Sandbox.kill(s.sandboxId, opts(api2));
    expect(await Sandbox.list({ ...opts(api1) }).nextItems()).toEqual([]);
    const gone = await fetch(`${api1.url}/sandboxes/${made[0]!.sandboxId}`, { headers: { "x-api-key": key } });
    expect(gone.status).toBe(404);
  }, 240_000);

  it("the Connect API (the locale2b CLI) through the replicas: create, list across nodes, exec, pause and resume, kill; errors keep their codes", async () => {
    const cli = (api: Served, [sub, ...args]: string[]) => runCli(["sandbox", sub!, "--url", api.url, ...args], { LOCALE2B_API_KEY: key }, 120_000);
    const ids: string[] = [];
    for (const api of [api1, api2]) {
      const made = await cli(api, ["create", "--metadata", "via=cli"]);
      expect(made.code, made.stderr).toBe(0);
      ids.push(made.stdout.trim());
    }
    expect(new Set(await Promise.all(ids.map(nodeOf))), api2.stderr()).toEqual(new Set(["n1", "n2"]));
    const listed = await cli(api2, ["list", "--metadata", "via=cli", "--json"]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toContain(ids[0]);
    expect(listed.stdout).toContain(ids[1]);
    for (const id of ids) {
      const r = await cli(api1, ["exec", id, "--", "sh", "-c", "echo $((6*7))"]);
      expect([r.code, r.stdout], r.stderr).toEqual([0, "42\n"]);
    }
    expect((await cli(api1, ["pause", ids[1]!])).code).toBe(0);
    expect((await store.getSandbox(ids[1]!))?.state).toBe("paused");
    expect((await cli(api2, ["resume", ids[1]!])).code).toBe(0);
    expect((await cli(api2, ["exec", ids[1]!, "--", "echo", "resumed"])).stdout).toBe("resumed\n");
    const missing = await cli(api1, ["kill", "nosuchsandbox000000000"]);
    expect([missing.code, missing.stderr]).toEqual([1, expect.stringMatching(/sandbox 'nosuchsandbox000000000' not found/)]);
    for (const id of ids) expect((await cli(api2, ["kill", id])).code).toBe(0);
    expect((await store.getSandbox(ids[0]!))?.state).toBe("killed");
  }, 300_000);

  it("an API replica killed mid-stream: the stream ends, the process runs on, and the SDK reconnects to it through another replica", async () => {
    const doomed = await startApi();
    const sbx = await Sandbox.create("base", { ...opts(doomed), timeoutMs: 120_000 });
    const seen: string[] = [];
    const handle = await sbx.commands.run("for i in $(seq 1 40); do echo tick $i; sleep 0.25; done", { background: true, onStdout: (d) => void seen.push(d) });
    await until("the first ticks", async () => (seen.join("").includes("tick 2") ? true : undefined));
    doomed.child.kill("SIGKILL");
    await handle.wait().catch((e: Error) => e); // the stream through the dead replica ends
    const before = seen.join("");
    // Another replica: the same sandbox, the same process, its output from where it is.
    const again = await Sandbox.connect(sbx.sandboxId, opts(api2));
    const more: string[] = [];
    const reattached = await again.commands.connect(handle.pid, { onStdout: (d) => void more.push(d) });
    const done = await reattached.wait();
    expect(done.exitCode).toBe(0);
    expect(more.join("")).toContain("tick 40");
    expect(before).not.toContain("tick 40"); // it really was cut mid-stream
    await again.kill();
  }, 120_000);

  it("the workspace API through the replicas: a workspace finds its sandbox through either, exec and files on its node, lists; events (paged, streamed, resumed) and audit of both nodes from Postgres", async () => {
    const ws = async (api: Served, method: string, path: string, body?: unknown) => {
      const r = await fetch(`${api.url}/workspace${path}`, { method, headers: { "x-api-key": key, ...(body ? { "content-type": "application/json" } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}) });
      const text = await r.text();
      return { status: r.status, json: (text && r.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : text) as Record<string, unknown> & string };
    };
    expect((await ws(api1, "GET", "/health")).json).toMatchObject({ status: "ok", runtime: "fleet", nodes: ["n1", "n2"] });
    const made = await ws(api1, "POST", "/sandboxes", { workspace_id: "fleet-ws-1" });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = made.json.sandbox_id as string;
    const other = await ws(api2, "POST", "/sandboxes", { workspace_id: "fleet-ws-2" });
    expect(new Set([await nodeOf(id), await nodeOf(other.json.sandbox_id as string)])).toEqual(new Set(["n1", "n2"]));
    // The same workspace through the other replica: the same sandbox.
    expect((await ws(api2, "POST", "/sandboxes", { workspace_id: "fleet-ws-1" })).json.sandbox_id).toBe(id);
    expect((await ws(api2, "POST", `/sandboxes/${id}/files/write`, { path: "/workspace/note.txt", content: "kept" })).status).toBe(200);
    const ran = await ws(api1, "POST", `/sandboxes/${id}/exec`, { command: "cat /workspace/note.txt; echo; echo $((6*7))" });
    expect(ran.json).toMatchObject({ stdout: "kept\n42\n", exit_code: 0 });
    const listed = (await ws(api2, "GET", "/sandboxes")).json.sandboxes as { sandbox_id: string }[];
    expect(listed.map((x) => x.sandbox_id)).toEqual(expect.arrayContaining([id, other.json.sandbox_id]));
    const otherId = other.json.sandbox_id as string;
    // Both nodes write their events to Postgres a moment (a batch) after the exec answers: read until they are there.
    type Ev = { id: number; event_type: string; sandbox_id: string; command?: string };
    const events = await until("the exec in the sandbox's events", async () => {
      const got = (await ws(api2, "GET", `/events?sandbox_id=${id}`)).json.events as Ev[];
      return got.some((e) => e.event_type === "exec.started") ? got : undefined;
    });
    expect(events.map((e) => e.event_type)).toEqual(expect.arrayContaining(["sandbox.created", "exec.started"]));
    // Without sandbox_id: the whole fleet's events, one numbering, in order, paged by id.
    const fleetWide = (await ws(api1, "GET", "/events?limit=10000")).json.events as Ev[];
    const ids = fleetWide.map((e) => e.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);
    for (const sid of [id, otherId]) expect(fleetWide.some((e) => e.sandbox_id === sid && e.event_type === "sandbox.created")).toBe(true);
    const paged = await ws(api2, "GET", `/events?since_id=${ids[1]}&limit=2`);
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
      const bad = await ws(api1, "GET", path);
      expect(bad.status, path).toBe(400);
      expect(bad.json.message, path).toMatch(message);
    }
    const badResume = await fetch(`${api1.url}/workspace/events/stream`, { headers: { "x-api-key": key, "last-event-id": "nope" } });
    expect(badResume.status).toBe(400);
    expect(((await badResume.json()) as { message: string }).message).toMatch(/since_id \(or Last-Event-ID\) must be an event id/);

    // The fleet's event stream: both nodes' exec events on one stream, with their ids.
    type Sse = { id: number; event: string; data: Ev & { last_id?: number } };
    const openStream = async (api: Served, lastEventId?: number) => {
      const ac = new AbortController();
      const res = await fetch(`${api.url}/workspace/events/stream?event_type=exec.completed`, { headers: { "x-api-key": key, ...(lastEventId !== undefined ? { "last-event-id": String(lastEventId) } : {}) }, signal: ac.signal });
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
    const live = await openStream(api1);
    const hello = await live.next((e) => e.event === "subscribed");
    for (const sid of [id, otherId]) await ws(api2, "POST", `/sandboxes/${sid}/exec`, { command: "echo live" });
    const seen = [await live.next((e) => e.event === "exec.completed"), await live.next((e) => e.event === "exec.completed")];
    expect(seen.map((e) => e.data.sandbox_id).sort()).toEqual([id, otherId].sort());
    for (const e of seen) {
      expect(e.id).toBe(e.data.id);
      expect(e.id).toBeGreaterThan(hello.data.last_id!);
    }
    expect(seen[1]!.id).toBeGreaterThan(seen[0]!.id);
    live.close();
    // Disconnected: more happens on both nodes. Resumed through the other replica with Last-Event-ID: exactly what was missed.
    for (const sid of [id, otherId]) for (const n of [1, 2]) await ws(api1, "POST", `/sandboxes/${sid}/exec`, { command: `echo missed-${n}` });
    const resumed = await openStream(api2, seen[1]!.id);
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
    const between = (await ws(api1, "GET", `/events?since_id=${seen[1]!.id}&event_type=exec.completed`)).json.events as Ev[];
    expect(between.map((e) => e.id)).toEqual(replayed.map((e) => e.id));

    // The Connect API's WatchSandboxEvents the same way: fleet ids from Postgres, resumed through the other replica.
    const watchVia = (api: Served, k = key) => apiClient(api.url, "connect-json", { "x-api-key": k });
    const connected = await watch(watchVia(api1), { eventTypes: ["exec.completed"] });
    for (const sid of [id, otherId]) await ws(api2, "POST", `/sandboxes/${sid}/exec`, { command: "echo connect-live" });
    const got = [await connected.next(), await connected.next()];
    connected.close();
    expect(got.map((e) => e.sandboxId).sort()).toEqual([id, otherId].sort());
    expect(got.every((e) => e.id > connected.subscribed.id)).toBe(true);
    for (const sid of [id, otherId]) await ws(api1, "POST", `/sandboxes/${sid}/exec`, { command: "echo connect-missed" });
    const again = await watch(watchVia(api2), { eventTypes: ["exec.completed"], afterId: got[1]!.id });
    const missed = [await again.next(), await again.next()];
    again.close();
    expect(missed.map((e) => `${e.sandboxId} ${e.activity?.command}`).sort()).toEqual([id, otherId].map((sid) => `${sid} echo connect-missed`).sort());
    expect(missed[1]!.id).toBeGreaterThan(missed[0]!.id);
    expect(missed[0]!.id).toBeGreaterThan(got[1]!.id);
    // Answered by the replica, not a node: it checks the key itself.
    expect((await rejection(watch(watchVia(api1, "e2b_" + "0".repeat(40)), { afterId: 1n }))).code).toBe(Code.Unauthenticated);

    // Both nodes' audit entries in one export from Postgres, one numbering (entries are written in batches: read until both are there).
    const audit = await until("both nodes' audit entries", async () => {
      const text = (await ws(api1, "GET", "/audit")).json as string;
      return text.includes(id) && text.includes(otherId) ? text : undefined;
    });
    const entries = audit.trim().split("\n").map((l) => JSON.parse(l) as { id: number; sandbox_id?: string; action: string });
    expect(entries.map((e) => e.id)).toEqual([...entries.map((e) => e.id)].sort((a, b) => a - b));
    for (const sid of [id, otherId]) expect(entries.some((e) => e.sandbox_id === sid && e.action === "POST /sandboxes")).toBe(true);
    const one = ((await ws(api2, "GET", `/audit?sandbox_id=${otherId}&format=csv`)).json as string).trim().split("\n");
    expect(one[0]).toMatch(/^id,time,actor/);
    expect(one.slice(1).every((l) => l.includes(otherId))).toBe(true);
    for (const sid of [id, otherId]) expect((await ws(api2, "DELETE", `/sandboxes/${sid}`)).status).toBe(200);
    expect((await ws(api1, "GET", `/sandboxes/${id}`)).status).toBe(404);
  }, 300_000);

  it("volumes through the replicas: made on a node, its file API and the sandboxes that mount it go there", async () => {
    const saved = { ...process.env };
    Object.assign(process.env, { E2B_API_KEY: key, E2B_API_URL: api2.url, E2B_SANDBOX_URL: api2.url, E2B_VOLUME_API_URL: api1.url });
    try {
      const vol = await Volume.create("fleet-vol");
      const home = (await store.getVolume(vol.volumeId))?.node;
      expect(["n1", "n2"]).toContain(home);
      await vol.writeFile("/from-api.txt", "written through a replica");
      const sbx = await Sandbox.create("base", { volumeMounts: { "/mnt/data": vol }, timeoutMs: 120_000 });
      expect(await nodeOf(sbx.sandboxId)).toBe(home); // placed where the volume's disk is
      expect((await sbx.commands.run("cat /mnt/data/from-api.txt; echo ok > /mnt/data/back.txt")).stdout).toBe("written through a replica");
      expect(await (await Volume.connect(vol.volumeId)).readFile("/back.txt")).toBe("ok\n");
      expect((await Volume.list()).map((v) => v.name)).toContain("fleet-vol");
      await sbx.kill();
      expect(await Volume.destroy(vol.volumeId)).toBe(true);
      expect(await store.getVolume(vol.volumeId)).toBeUndefined();
    } finally {
      for (const k of ["E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_VOLUME_API_URL"]) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
    }
  }, 180_000);

  it("secrets through either replica, from the shared store: made through one, read, updated, listed and deleted through the other; sealed in Postgres", async () => {
    const value = `fleet-canary-${randomBytes(8).toString("hex")}`;
    const s = await Secret.create("fleet-secret", value, opts(api1));
    expect((await Secret.getInfo("FLEET-SECRET", opts(api2))).secretId).toBe(s.secretId);
    expect((await Secret.update(s.secretId, `${value}-2`, opts(api2))).version).toBe(2);
    expect((await Secret.list(opts(api1)).nextItems()).map((x) => [x.name, x.version])).toEqual([["fleet-secret", 2]]);
    const c = new pgLib.Client({ connectionString: db });
    await c.connect();
    try {
      const dump = JSON.stringify((await c.query("SELECT s.*, v.* FROM secrets s JOIN secret_versions v ON v.secret_id = s.id")).rows);
      expect(dump).toContain(s.secretId);
      expect(dump).not.toContain(value);
    } finally {
      await c.end();
    }
    expect(await Secret.destroy("fleet-secret", opts(api2))).toBe(true);
    await expect(Secret.getInfo(s.secretId, opts(api1))).rejects.toBeInstanceOf(SecretNotFoundError);
  });

  it("a template built with the Template SDK through a replica runs on the other node too: its image is copied there on demand", async () => {
    const t = Template().fromTemplate("base").runCmd("echo built-in-the-fleet > /home/user/marker.txt");
    const built = await Template.build(t, "fleet-tpl", { apiKey: key, apiUrl: api2.url, onBuildLogs: () => undefined });
    const image = `@${built.buildId}`;
    const holders = async () => (await store.listNodes()).filter((n) => n.images.includes(image)).map((n) => n.name);
    const builtOn = await until("the build in a heartbeat", async () => ((await holders()).length ? holders() : undefined), 40, 500);
    expect(builtOn).toEqual(["n1"]); // the replicas send template builds to the first ready node
    // Only n2 takes creates now: it copies the image from n1, then boots it.
    await runCli(["nodes", "cordon", "n1"], { LOCALE2B_DATABASE_URL: db });
    try {
      const sbx = await Sandbox.create("fleet-tpl", { ...opts(api1), timeoutMs: 120_000 });
      expect(await nodeOf(sbx.sandboxId)).toBe("n2");
      expect((await sbx.commands.run("cat /home/user/marker.txt")).stdout).toBe("built-in-the-fleet\n");
      await sbx.kill();
      expect(existsSync(join(n2Images, "templates", `${image}.current`))).toBe(true);
      await until("the copy in n2's heartbeat", async () => ((await holders()).length === 2 ? true : undefined), 40, 500);
    } finally {
      await runCli(["nodes", "uncordon", "n1"], { LOCALE2B_DATABASE_URL: db });
    }
    // Deleted through a replica: gone for creates everywhere.
    expect((await fetch(`${api1.url}/templates/${built.templateId}`, { method: "DELETE", headers: { "x-api-key": key } })).status).toBe(204);
    const gone = await fetch(`${api1.url}/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "fleet-tpl" }) });
    expect(gone.status).toBe(404);
  }, 600_000);

  it("a cordoned node takes no creates; a restarted node adopts its sandboxes; a lost node's sandboxes say so, their history stays readable, and creates go elsewhere", async () => {
    expect((await runCli(["nodes", "cordon", "n2"], { LOCALE2B_DATABASE_URL: db })).stdout).toBe("cordoned n2\n");
    const onN1 = await Promise.all([0, 1].map(() => Sandbox.create("base", { ...opts(api1), timeoutMs: 300_000 })));
    expect(await Promise.all(onN1.map((s) => nodeOf(s.sandboxId)))).toEqual(["n1", "n1"]);
    expect((await runCli(["nodes", "cordon", "n1"], { LOCALE2B_DATABASE_URL: db })).code).toBe(0);
    const refused = await fetch(`${api2.url}/sandboxes`, { method: "POST", headers: { "x-api-key": key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "base" }) });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { message: string }).message).toMatch(/no node can take this sandbox.*none ready for it \(cordoned/);
    await runCli(["nodes", "uncordon", "n1"], { LOCALE2B_DATABASE_URL: db });
    await runCli(["nodes", "uncordon", "n2"], { LOCALE2B_DATABASE_URL: db });

    // Restart n1 (a new port): the replicas find it again, its sandboxes were adopted.
    const before = nodes.n1!.url;
    expect(await nodes.n1!.stop()).toBe(0);
    await startNode("n1");
    expect(nodes.n1!.url).not.toBe(before);
    const again = await until("the restarted node behind the replicas", async () => {
      const c = await Sandbox.connect(onN1[0]!.sandboxId, opts(api2));
      return (await c.commands.run("echo adopted")).stdout === "adopted\n" ? c : undefined;
    });
    expect(again.sandboxId).toBe(onN1[0]!.sandboxId);

    // Lose n2 (killed, no goodbye) with a sandbox on it.
    await runCli(["nodes", "cordon", "n1"], { LOCALE2B_DATABASE_URL: db });
    const onN2 = await until("a create on n2", async () => Sandbox.create("base", { ...opts(api1), timeoutMs: 300_000 }));
    expect(await nodeOf(onN2.sandboxId)).toBe("n2");
    await runCli(["nodes", "uncordon", "n1"], { LOCALE2B_DATABASE_URL: db });
    // n2 samples its sandbox every 5 s into Postgres: wait for two samples and the create's audit entry there.
    const sql = new pgLib.Client({ connectionString: db });
    await sql.connect();
    await until(
      "n2's samples and audit entry in Postgres",
      async () => {
        const samples = await sql.query<{ n: string }>("SELECT count(*) AS n FROM metric_samples WHERE sandbox_id = $1", [onN2.sandboxId]);
        const audited = await sql.query<{ n: string }>("SELECT count(*) AS n FROM audit WHERE sandbox_id = $1", [onN2.sandboxId]);
        return Number(samples.rows[0]!.n) >= 2 && Number(audited.rows[0]!.n) >= 1 ? true : undefined;
      },
      120,
      500,
    );
    await sql.end();
    nodes.n2!.child.kill("SIGKILL");
    const lost = await until(
      "n2 to be lost",
      async () => {
        const r = await fetch(`${api1.url}/sandboxes/${onN2.sandboxId}`, { headers: { "x-api-key": key } });
        return r.status === 503 ? ((await r.json()) as { message: string }).message : undefined;
      },
      Math.ceil((NODE_LOST_MS + 15_000) / 500),
      500,
    );
    expect(lost).toMatch(new RegExp(`sandbox ${onN2.sandboxId} was lost with node 'n2': no heartbeat for \\d+ s`));
    // Its history stays readable through any replica, from Postgres: events, audit entries, metrics.
    const auth = { "x-api-key": key };
    const history = (await (await fetch(`${api2.url}/workspace/events?sandbox_id=${onN2.sandboxId}`, { headers: auth })).json()) as { events: { event_type: string }[] };
    expect(history.events.map((e) => e.event_type)).toContain("sandbox.created");
    const lostAudit = (await (await fetch(`${api1.url}/workspace/audit?sandbox_id=${onN2.sandboxId}`, { headers: auth })).text()).trim().split("\n");
    expect(lostAudit.map((l) => JSON.parse(l) as { api: string; action: string })).toEqual(expect.arrayContaining([expect.objectContaining({ api: "e2b", action: "POST /v2/sandboxes", result: "ok" })]));
    const metricsRes = await fetch(`${api2.url}/sandboxes/${onN2.sandboxId}/metrics`, { headers: auth });
    expect(metricsRes.status).toBe(200);
    const samples = (await metricsRes.json()) as { timestampUnix: number; memTotal: number }[];
    expect(samples.length).toBeGreaterThanOrEqual(2);
    expect(samples.map((m) => m.timestampUnix)).toEqual([...samples.map((m) => m.timestampUnix)].sort((a, b) => a - b));
    const pick = samples[0]!.timestampUnix;
    const one = (await (await fetch(`${api1.url}/sandboxes/${onN2.sandboxId}/metrics?start=${pick}&end=${pick}`, { headers: auth })).json()) as { timestampUnix: number }[];
    expect(one.length).toBeGreaterThanOrEqual(1);
    expect(one.every((m) => m.timestampUnix === pick)).toBe(true);
    const latest = (await (await fetch(`${api1.url}/sandboxes/metrics?sandbox_ids=${onN2.sandboxId},nosuchsandbox`, { headers: auth })).json()) as { sandboxes: Record<string, { timestampUnix: number }> };
    expect(Object.keys(latest.sandboxes)).toEqual([onN2.sandboxId]);
    expect(latest.sandboxes[onN2.sandboxId]!.timestampUnix).toBe(samples.at(-1)!.timestampUnix);
    for (const [query, message] of [
      ["?start=10&end=5", "start (10) is after end (5)"],
      ["?start=yesterday", "invalid start 'yesterday': expected unix seconds"],
    ] as const) {
      const bad = await fetch(`${api1.url}/sandboxes/${onN2.sandboxId}/metrics${query}`, { headers: auth });
      expect(bad.status, query).toBe(400);
      expect(((await bad.json()) as { message: string }).message).toBe(message);
    }
    // The workspace API's metrics of a sandbox on a lost node: from Postgres, status lost.
    const wsMetrics = await fetch(`${api2.url}/workspace/sandboxes/${onN2.sandboxId}/metrics?start=${pick}`, { headers: auth });
    expect(wsMetrics.status).toBe(200);
    const wsBody = (await wsMetrics.json()) as { status: string; message: string; timestamp: string; samples: unknown[] };
    expect(wsBody).toMatchObject({ status: "lost", message: expect.stringMatching(/lost with node 'n2'/) });
    expect(wsBody.samples.length).toBe(samples.length);
    expect(Date.parse(wsBody.timestamp) / 1000).toBeGreaterThanOrEqual(samples.at(-1)!.timestampUnix);
    const wsBad = await fetch(`${api2.url}/workspace/sandboxes/${onN2.sandboxId}/metrics?start=10&end=5`, { headers: auth });
    expect(wsBad.status).toBe(400);
    expect(((await wsBad.json()) as { message: string }).message).toBe("start is after end");
    expect((await fetch(`${api2.url}/workspace/sandboxes/${onN2.sandboxId}/files/read?path=x`, { headers: auth })).status).toBe(503);
    const noIds = await fetch(`${api1.url}/sandboxes/metrics`, { headers: auth });
    expect(noIds.status).toBe(400);
    expect(((await noIds.json()) as { message: string }).message).toMatch(/'sandbox_ids' is required/);
    expect((await fetch(`${api1.url}/sandboxes/nosuchsandbox/metrics`, { headers: auth })).status).toBe(404);
    const viaSdk = await Sandbox.connect(onN2.sandboxId, opts(api2)).then(
      (s) => s.commands.run("true"),
      (e: Error) => e,
    ).catch((e: Error) => e);
    expect(String(viaSdk)).toMatch(/lost with node 'n2'/);
    const elsewhere = await Sandbox.create("base", { ...opts(api2), timeoutMs: 60_000 });
    expect(await nodeOf(elsewhere.sandboxId)).toBe("n1");
    const listed = JSON.parse((await runCli(["nodes", "list", "--json"], { LOCALE2B_DATABASE_URL: db })).stdout) as { name: string; status: string }[];
    expect(listed.find((n) => n.name === "n2")?.status).toBe("lost");
    // n2 back: it adopts its sandbox, which answers again.
    await startNode("n2");
    const back = await until("n2 back behind the replicas", async () => {
      const c = await Sandbox.connect(onN2.sandboxId, opts(api1));
      return (await c.commands.run("echo back")).stdout === "back\n" ? c : undefined;
    });
    for (const s of [...onN1, elsewhere, back]) await Sandbox.kill(s.sandboxId, opts(api1));
  }, 240_000);
});
