// A fleet on one machine (test/helpers/fleet.ts: a real Postgres, two `locale2b
// node` processes on the process runtime, two `locale2b api` replicas), driven
// with the real E2B SDK and the Connect API through the replicas only.
// Creates spread over both nodes; any replica serves any sandbox (commands,
// files, signed URLs, user ports); lists merge and page across nodes; nodes
// answer only the replicas, and the node token never reaches a sandbox; an API
// replica killed mid-stream; cordon, a node restart (re-adoption) and a lost
// node behave as docs/fleet.md says. The workspace API, activity history,
// volumes, secrets and templates through a fleet: fleet-data.test.ts.
import { CommandExitError, Sandbox } from "e2b";
import pgLib from "pg";
import { describe, expect, it } from "vitest";
import { NODE_LOST_MS } from "../../control-plane/domain/node.js";
import { runCli, type Served } from "../helpers/cli.js";
import { fleetMissing, getWithHost, useTestFleet } from "../helpers/fleet.js";
import { waitForValue } from "../helpers/wait.js";


const missing = fleetMissing();
if (missing) console.warn(`fleet.test.ts: skipping: ${missing}`);

describe.skipIf(missing !== undefined)("a fleet: two nodes, two API replicas, one Postgres", () => {
  const f = useTestFleet();
  const opts = (api: Served) => f.opts(api);
  const nodeOf = (id: string) => f.nodeOf(id);

  it("nodes answer only the API replicas: no token, a wrong token, or the client's own token header get 401 and nothing else", async () => {
    const n1 = f.nodes.n1!.url;
    const tries: Record<string, string>[] = [{ "x-api-key": f.key }, { "x-api-key": f.key, "x-locale2b-node-token": "x".repeat(64) }];
    for (const headers of tries) {
      const r = await fetch(`${n1}/v2/sandboxes`, { headers });
      expect(r.status).toBe(401);
      expect(((await r.json()) as { message: string }).message).toMatch(/fleet node: it serves only the fleet's API replicas/);
    }
    expect((await fetch(`${n1}/health`)).status).toBe(200);
    const listed = await runCli(["nodes", "list", "--json"], { LOCALE2B_DATABASE_URL: f.db });
    expect(listed.code, listed.stderr).toBe(0);
    const fleet = JSON.parse(listed.stdout) as { name: string; status: string; url: string }[];
    expect(fleet.map((n) => [n.name, n.status])).toEqual([
      ["n1", "ready"],
      ["n2", "ready"],
    ]);
    expect(fleet[0]!.url).toBe(f.nodes.n1!.url);
  });

  it("the fleet commands say what is missing: the Postgres, the node token, a long enough token, a known node", async () => {
    const noDb = await runCli(["node", "--port", "0"], { LOCALE2B_NODE_TOKEN: f.token });
    expect([noDb.code, noDb.stderr]).toEqual([2, expect.stringMatching(/locale2b node needs the fleet's Postgres: --database-url or LOCALE2B_DATABASE_URL/)]);
    const noToken = await runCli(["api", "--port", "0"], { LOCALE2B_DATABASE_URL: f.db });
    expect([noToken.code, noToken.stderr]).toEqual([2, expect.stringMatching(/locale2b api needs LOCALE2B_NODE_TOKEN, the fleet's shared secret/)]);
    const short = await runCli(["node", "--port", "0"], { LOCALE2B_DATABASE_URL: f.db, LOCALE2B_NODE_TOKEN: "hunter2" });
    expect([short.code, short.stderr]).toEqual([2, expect.stringMatching(/LOCALE2B_NODE_TOKEN is 7 characters: use at least 32/)]);
    const badUrl = await runCli(["node", "--advertise-url", "ftp://x"], { LOCALE2B_DATABASE_URL: f.db, LOCALE2B_NODE_TOKEN: f.token });
    expect(badUrl.stderr).toMatch(/--advertise-url 'ftp:\/\/x' must be http:\/\/host:port/);
    const unknown = await runCli(["nodes", "cordon", "nope"], { LOCALE2B_DATABASE_URL: f.db });
    expect([unknown.code, unknown.stderr]).toEqual([1, expect.stringMatching(/no node 'nope' in this fleet/)]);
  });

  it("creates spread over both nodes, and any replica serves any sandbox: commands, files, signed URLs, user ports, lists", async () => {
    const made = await Promise.all([0, 1, 2, 3].map((i) => Sandbox.create("base", { ...opts(i % 2 ? f.api2 : f.api1), timeoutMs: 300_000, metadata: { i: String(i) }, secure: true })));
    const where = await Promise.all(made.map((s) => nodeOf(s.sandboxId)));
    expect(new Set(where)).toEqual(new Set(["n1", "n2"]));

    for (const s of made) {
      // Through the other replica than the one that created it.
      const other = await Sandbox.connect(s.sandboxId, opts(Number(s.sandboxId.length) % 2 ? f.api1 : f.api2));
      const chunks: string[] = [];
      const r = await other.commands.run("for i in 1 2 3; do echo line $i; sleep 0.2; done; hostname", { onStdout: (d) => void chunks.push(d) });
      expect(r.stdout).toMatch(/^line 1\nline 2\nline 3\n/);
      expect(chunks.length).toBeGreaterThanOrEqual(2); // streamed, not buffered at either hop
      await other.files.write("/home/user/where.txt", `on ${await nodeOf(s.sandboxId)}`);
      const back = await Sandbox.connect(s.sandboxId, opts(f.api1));
      expect(await back.files.read("/home/user/where.txt")).toBe(`on ${await nodeOf(s.sandboxId)}`);
      await expect(back.commands.run("exit 3")).rejects.toBeInstanceOf(CommandExitError);
    }

    // From inside a sandbox, as user and as root, a node's port and the API's are out of reach (and a node would want its token).
    const gw = /default via (\S+)/.exec((await made[0]!.commands.run("ip route show default")).stdout)?.[1];
    expect(gw).toBeDefined();
    const ports = [f.nodes.n1!.url, f.nodes.n2!.url, f.api1.url].map((u) => new URL(u).port);
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
    for (const api of [f.api1, f.api2]) {
      const r = await fetch(`${api.url}${url.pathname}${url.search}`);
      expect(r.status, await r.clone().text()).toBe(200);
      expect(await r.text()).toMatch(/^on n[12]$/);
    }
    url.searchParams.set("signature", "v1_" + "A".repeat(43));
    expect((await fetch(`${f.api1.url}${url.pathname}${url.search}`)).status).toBe(401);

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
    expect(host).toBe(`8123-${s1.sandboxId}.localhost:${new URL(f.api1.url).port}`);
    for (const api of [f.api1, f.api2]) {
      const r = await waitForValue("the sandbox's server", async () => {
        const got = await getWithHost(api.url, host, "/", { "x-locale2b-node-token": f.token });
        if (got.status !== 200) throw new Error(`${got.status}: ${got.body}`);
        return got;
      });
      const seen = JSON.parse(r.body) as Record<string, string>;
      expect(Object.keys(seen).map((k) => k.toLowerCase())).not.toContain("x-locale2b-node-token");
      expect(r.body).not.toContain(f.token);
    }

    // The list is every node's, merged, and pages across f.nodes.
    for (const api of [f.api1, f.api2]) {
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
    for (const s of made) await Sandbox.kill(s.sandboxId, opts(f.api2));
    expect(await Sandbox.list({ ...opts(f.api1) }).nextItems()).toEqual([]);
    const gone = await fetch(`${f.api1.url}/sandboxes/${made[0]!.sandboxId}`, { headers: { "x-api-key": f.key } });
    expect(gone.status).toBe(404);
  }, 240_000);

  it("the Connect API (the locale2b CLI) through the replicas: create, list across nodes, exec, pause and resume, kill; errors keep their codes", async () => {
    const cli = (api: Served, [sub, ...args]: string[]) => runCli(["sandbox", sub!, "--url", api.url, ...args], { LOCALE2B_API_KEY: f.key }, 120_000);
    const ids: string[] = [];
    for (const api of [f.api1, f.api2]) {
      const made = await cli(api, ["create", "--metadata", "via=cli"]);
      expect(made.code, made.stderr).toBe(0);
      ids.push(made.stdout.trim());
    }
    expect(new Set(await Promise.all(ids.map(nodeOf))), f.api2.stderr()).toEqual(new Set(["n1", "n2"]));
    const listed = await cli(f.api2, ["list", "--metadata", "via=cli", "--json"]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toContain(ids[0]);
    expect(listed.stdout).toContain(ids[1]);
    for (const id of ids) {
      const r = await cli(f.api1, ["exec", id, "--", "sh", "-c", "echo $((6*7))"]);
      expect([r.code, r.stdout], r.stderr).toEqual([0, "42\n"]);
    }
    expect((await cli(f.api1, ["pause", ids[1]!])).code).toBe(0);
    expect((await f.store.getSandbox(ids[1]!))?.state).toBe("paused");
    expect((await cli(f.api2, ["resume", ids[1]!])).code).toBe(0);
    expect((await cli(f.api2, ["exec", ids[1]!, "--", "echo", "resumed"])).stdout).toBe("resumed\n");
    const missing = await cli(f.api1, ["kill", "nosuchsandbox000000000"]);
    expect([missing.code, missing.stderr]).toEqual([1, expect.stringMatching(/sandbox 'nosuchsandbox000000000' not found/)]);
    for (const id of ids) expect((await cli(f.api2, ["kill", id])).code).toBe(0);
    expect((await f.store.getSandbox(ids[0]!))?.state).toBe("killed");
  }, 300_000);

  it("an API replica killed mid-stream: the stream ends, the process runs on, and the SDK reconnects to it through another replica", async () => {
    const doomed = await f.startApi();
    const sbx = await Sandbox.create("base", { ...opts(doomed), timeoutMs: 120_000 });
    const seen: string[] = [];
    const handle = await sbx.commands.run("for i in $(seq 1 40); do echo tick $i; sleep 0.25; done", { background: true, onStdout: (d) => void seen.push(d) });
    await waitForValue("the first ticks", async () => (seen.join("").includes("tick 2") ? true : undefined));
    doomed.child.kill("SIGKILL");
    await handle.wait().catch((e: Error) => e); // the stream through the dead replica ends
    const before = seen.join("");
    // Another replica: the same sandbox, the same process, its output from where it is.
    const again = await Sandbox.connect(sbx.sandboxId, opts(f.api2));
    const more: string[] = [];
    const reattached = await again.commands.connect(handle.pid, { onStdout: (d) => void more.push(d) });
    const done = await reattached.wait();
    expect(done.exitCode).toBe(0);
    expect(more.join("")).toContain("tick 40");
    expect(before).not.toContain("tick 40"); // it really was cut mid-stream
    await again.kill();
  }, 120_000);


  it("a cordoned node takes no creates; a restarted node adopts its sandboxes; a lost node's sandboxes say so, their history stays readable, and creates go elsewhere", async () => {
    expect((await runCli(["nodes", "cordon", "n2"], { LOCALE2B_DATABASE_URL: f.db })).stdout).toBe("cordoned n2\n");
    const onN1 = await Promise.all([0, 1].map(() => Sandbox.create("base", { ...opts(f.api1), timeoutMs: 300_000 })));
    expect(await Promise.all(onN1.map((s) => nodeOf(s.sandboxId)))).toEqual(["n1", "n1"]);
    expect((await runCli(["nodes", "cordon", "n1"], { LOCALE2B_DATABASE_URL: f.db })).code).toBe(0);
    const refused = await fetch(`${f.api2.url}/sandboxes`, { method: "POST", headers: { "x-api-key": f.key, "content-type": "application/json" }, body: JSON.stringify({ templateID: "base" }) });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { message: string }).message).toMatch(/no node can take this sandbox.*none ready for it \(cordoned/);
    await runCli(["nodes", "uncordon", "n1"], { LOCALE2B_DATABASE_URL: f.db });
    await runCli(["nodes", "uncordon", "n2"], { LOCALE2B_DATABASE_URL: f.db });

    // Restart n1 (a new port): the replicas find it again, its sandboxes were adopted.
    const before = f.nodes.n1!.url;
    expect(await f.nodes.n1!.stop()).toBe(0);
    await f.startNode("n1");
    expect(f.nodes.n1!.url).not.toBe(before);
    const again = await waitForValue("the restarted node behind the replicas", async () => {
      const c = await Sandbox.connect(onN1[0]!.sandboxId, opts(f.api2));
      return (await c.commands.run("echo adopted")).stdout === "adopted\n" ? c : undefined;
    });
    expect(again.sandboxId).toBe(onN1[0]!.sandboxId);

    // Lose n2 (killed, no goodbye) with a sandbox on it.
    await runCli(["nodes", "cordon", "n1"], { LOCALE2B_DATABASE_URL: f.db });
    const onN2 = await waitForValue("a create on n2", async () => Sandbox.create("base", { ...opts(f.api1), timeoutMs: 300_000 }));
    expect(await nodeOf(onN2.sandboxId)).toBe("n2");
    await runCli(["nodes", "uncordon", "n1"], { LOCALE2B_DATABASE_URL: f.db });
    // n2 samples its sandbox every 5 s into Postgres: wait for two samples and the create's audit entry there.
    const sql = new pgLib.Client({ connectionString: f.db });
    await sql.connect();
    await waitForValue(
      "n2's samples and audit entry in Postgres",
      async () => {
        const samples = await sql.query<{ n: string }>("SELECT count(*) AS n FROM metric_samples WHERE sandbox_id = $1", [onN2.sandboxId]);
        const audited = await sql.query<{ n: string }>("SELECT count(*) AS n FROM audit WHERE sandbox_id = $1", [onN2.sandboxId]);
        return Number(samples.rows[0]!.n) >= 2 && Number(audited.rows[0]!.n) >= 1 ? true : undefined;
      },
      { timeoutMs: 60_000, everyMs: 500 },
    );
    await sql.end();
    f.nodes.n2!.child.kill("SIGKILL");
    const lost = await waitForValue(
      "n2 to be lost",
      async () => {
        const r = await fetch(`${f.api1.url}/sandboxes/${onN2.sandboxId}`, { headers: { "x-api-key": f.key } });
        return r.status === 503 ? ((await r.json()) as { message: string }).message : undefined;
      },
      { timeoutMs: NODE_LOST_MS + 15_000, everyMs: 500 },
    );
    expect(lost).toMatch(new RegExp(`sandbox ${onN2.sandboxId} was lost with node 'n2': no heartbeat for \\d+ s`));
    // Its history stays readable through any replica, from Postgres: events, audit entries, metrics.
    const auth = { "x-api-key": f.key };
    const history = (await (await fetch(`${f.api2.url}/workspace/events?sandbox_id=${onN2.sandboxId}`, { headers: auth })).json()) as { events: { event_type: string }[] };
    expect(history.events.map((e) => e.event_type)).toContain("sandbox.created");
    const lostAudit = (await (await fetch(`${f.api1.url}/workspace/audit?sandbox_id=${onN2.sandboxId}`, { headers: auth })).text()).trim().split("\n");
    expect(lostAudit.map((l) => JSON.parse(l) as { api: string; action: string })).toEqual(expect.arrayContaining([expect.objectContaining({ api: "e2b", action: "POST /v2/sandboxes", result: "ok" })]));
    const metricsRes = await fetch(`${f.api2.url}/sandboxes/${onN2.sandboxId}/metrics`, { headers: auth });
    expect(metricsRes.status).toBe(200);
    const samples = (await metricsRes.json()) as { timestampUnix: number; memTotal: number }[];
    expect(samples.length).toBeGreaterThanOrEqual(2);
    expect(samples.map((m) => m.timestampUnix)).toEqual([...samples.map((m) => m.timestampUnix)].sort((a, b) => a - b));
    const pick = samples[0]!.timestampUnix;
    const one = (await (await fetch(`${f.api1.url}/sandboxes/${onN2.sandboxId}/metrics?start=${pick}&end=${pick}`, { headers: auth })).json()) as { timestampUnix: number }[];
    expect(one.length).toBeGreaterThanOrEqual(1);
    expect(one.every((m) => m.timestampUnix === pick)).toBe(true);
    const latest = (await (await fetch(`${f.api1.url}/sandboxes/metrics?sandbox_ids=${onN2.sandboxId},nosuchsandbox`, { headers: auth })).json()) as { sandboxes: Record<string, { timestampUnix: number }> };
    expect(Object.keys(latest.sandboxes)).toEqual([onN2.sandboxId]);
    expect(latest.sandboxes[onN2.sandboxId]!.timestampUnix).toBe(samples.at(-1)!.timestampUnix);
    for (const [query, message] of [
      ["?start=10&end=5", "start (10) is after end (5)"],
      ["?start=yesterday", "invalid start 'yesterday': expected unix seconds"],
    ] as const) {
      const bad = await fetch(`${f.api1.url}/sandboxes/${onN2.sandboxId}/metrics${query}`, { headers: auth });
      expect(bad.status, query).toBe(400);
      expect(((await bad.json()) as { message: string }).message).toBe(message);
    }
    // The workspace API's metrics of a sandbox on a lost node: from Postgres, status lost.
    const wsMetrics = await fetch(`${f.api2.url}/workspace/sandboxes/${onN2.sandboxId}/metrics?start=${pick}`, { headers: auth });
    expect(wsMetrics.status).toBe(200);
    const wsBody = (await wsMetrics.json()) as { status: string; message: string; timestamp: string; samples: unknown[] };
    expect(wsBody).toMatchObject({ status: "lost", message: expect.stringMatching(/lost with node 'n2'/) });
    expect(wsBody.samples.length).toBe(samples.length);
    expect(Date.parse(wsBody.timestamp) / 1000).toBeGreaterThanOrEqual(samples.at(-1)!.timestampUnix);
    const wsBad = await fetch(`${f.api2.url}/workspace/sandboxes/${onN2.sandboxId}/metrics?start=10&end=5`, { headers: auth });
    expect(wsBad.status).toBe(400);
    expect(((await wsBad.json()) as { message: string }).message).toBe("start is after end");
    expect((await fetch(`${f.api2.url}/workspace/sandboxes/${onN2.sandboxId}/files/read?path=x`, { headers: auth })).status).toBe(503);
    const noIds = await fetch(`${f.api1.url}/sandboxes/metrics`, { headers: auth });
    expect(noIds.status).toBe(400);
    expect(((await noIds.json()) as { message: string }).message).toMatch(/'sandbox_ids' is required/);
    expect((await fetch(`${f.api1.url}/sandboxes/nosuchsandbox/metrics`, { headers: auth })).status).toBe(404);
    const viaSdk = await Sandbox.connect(onN2.sandboxId, opts(f.api2)).then(
      (s) => s.commands.run("true"),
      (e: Error) => e,
    ).catch((e: Error) => e);
    expect(String(viaSdk)).toMatch(/lost with node 'n2'/);
    const elsewhere = await Sandbox.create("base", { ...opts(f.api2), timeoutMs: 60_000 });
    expect(await nodeOf(elsewhere.sandboxId)).toBe("n1");
    const listed = JSON.parse((await runCli(["nodes", "list", "--json"], { LOCALE2B_DATABASE_URL: f.db })).stdout) as { name: string; status: string }[];
    expect(listed.find((n) => n.name === "n2")?.status).toBe("lost");
    // n2 back: it adopts its sandbox, which answers again.
    await f.startNode("n2");
    const back = await waitForValue("n2 back behind the replicas", async () => {
      const c = await Sandbox.connect(onN2.sandboxId, opts(f.api1));
      return (await c.commands.run("echo back")).stdout === "back\n" ? c : undefined;
    });
    for (const s of [...onN1, elsewhere, back]) await Sandbox.kill(s.sandboxId, opts(f.api1));
  }, 240_000);
});
