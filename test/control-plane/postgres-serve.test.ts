// `serve` with its store in Postgres (LOCALE2B_DATABASE_URL): real servers,
// a real Postgres, the real E2B SDK. Two hosts share keys and templates; each
// adopts only its own sandboxes; a node name is held by one server at a time.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, serve, type Served } from "../helpers/cli.js";
import { postgresMissing, startPostgres, type TestPostgres } from "../helpers/postgres.js";

const missing = postgresMissing() ?? (process.getuid?.() !== 0 ? "the process runtime's sandboxes need root" : undefined);
if (missing) console.warn(`postgres-serve.test.ts: skipping: ${missing}`);

describe.skipIf(missing !== undefined)("serve with a Postgres store", () => {
  let pg: TestPostgres;
  let url: string;
  const dirs: string[] = [];
  const servers: Served[] = [];
  const dataDir = () => {
    const d = mkdtempSync(join(tmpdir(), "locale2b-pgserve-"));
    dirs.push(d);
    return d;
  };
  const start = async (dir: string, node: string) => {
    const s = await serve(dir, ["--warm-pool", "0", "--node-name", node], { LOCALE2B_DATABASE_URL: url, LOCALE2B_NO_IMAGE_BUILD: "1" });
    servers.push(s);
    return s;
  };

  beforeAll(async () => {
    pg = await startPostgres();
    url = await pg.database();
  });

  afterAll(async () => {
    for (const s of servers) if (s.child.exitCode === null) await s.stop();
    await pg?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it("keeps sandboxes and keys there: shared keys, each node its own sandboxes, a restart adopts them, a node name is one server's", async () => {
    const dirA = dataDir();
    let a = await start(dirA, "node-a");
    // The first server on an empty database makes the key; it is in Postgres, so every server takes it.
    const key = /export E2B_API_KEY=(e2b_[0-9a-f]{40})/.exec(a.banner)?.[1];
    expect(key, a.banner).toBeDefined();
    const opts = (s: Served) => ({ apiKey: key!, apiUrl: s.url, sandboxUrl: s.url });

    const sbx = await Sandbox.create("base", { ...opts(a), timeoutMs: 600_000, metadata: { who: "a" } });
    await sbx.files.write("/home/user/kept.txt", "kept across a restart");
    expect((await sbx.commands.run("echo on node a")).stdout).toBe("on node a\n");

    // The store is out of a sandbox's reach, as user and as root: not its Unix socket, not a TCP port on the host.
    const socketDir = decodeURIComponent(new URL(url).host);
    const gw = /default via (\S+)/.exec((await sbx.commands.run("ip route show default")).stdout)?.[1];
    expect(gw).toBeDefined();
    for (const user of ["user", "root"] as const) {
      const probe = `import socket
for target in [("unix", "${socketDir}/.s.PGSQL.5432"), ("tcp", ("${gw}", 5432)), ("tcp", ("127.0.0.1", 5432))]:
    s = socket.socket(socket.AF_UNIX if target[0] == "unix" else socket.AF_INET)
    s.settimeout(3)
    try:
        s.connect(target[1]); print("REACHED", target)
    except OSError as e:
        print("refused", target, type(e).__name__)`;
      await sbx.files.write("/tmp/probe.py", probe, { user });
      const r = await sbx.commands.run("python3 /tmp/probe.py", { user });
      expect(r.stdout, user).not.toMatch(/REACHED/);
      expect(r.stdout.match(/refused/g)?.length, r.stdout).toBe(3);
    }

    // Another host on the same database: the key works, the other node's sandboxes are not its own.
    const b = await start(dataDir(), "node-b");
    expect(b.banner).not.toMatch(/export E2B_API_KEY=e2b_/);
    expect((await Sandbox.list({ ...opts(b) }).nextItems()).map((s) => s.sandboxId)).toEqual([]);
    expect((await Sandbox.list({ ...opts(a) }).nextItems()).map((s) => s.sandboxId)).toEqual([sbx.sandboxId]);

    // Keys made with the CLI against the database work on every server; revoked, on none.
    const made = await runCli(["keys", "create", "--name", "ci"], { LOCALE2B_DATABASE_URL: url });
    expect(made.code, made.stderr).toBe(0);
    const ciKey = made.stdout.trim();
    expect(made.stderr).toMatch(/in the Postgres store/);
    for (const s of [a, b]) expect((await fetch(`${s.url}/v2/sandboxes`, { headers: { "x-api-key": ciKey } })).status).toBe(200);
    expect((await runCli(["keys", "revoke", ciKey], { LOCALE2B_DATABASE_URL: url })).code).toBe(0);
    expect((await fetch(`${b.url}/v2/sandboxes`, { headers: { "x-api-key": ciKey } })).status).toBe(401);

    // One server per node name.
    await expect(start(dataDir(), "node-a")).rejects.toThrow(/node name 'node-a' is in use by another locale2b server on this database/);

    // A restart of node a (its sandboxes run on) adopts the sandbox again from Postgres.
    expect(await a.stop()).toBe(0);
    a = await start(dirA, "node-a");
    const again = await Sandbox.connect(sbx.sandboxId, opts(a));
    expect(await again.files.read("/home/user/kept.txt")).toBe("kept across a restart");
    expect((await again.commands.run("echo still here")).stdout).toBe("still here\n");
    expect((await Sandbox.getInfo(sbx.sandboxId, opts(a))).metadata).toEqual({ who: "a" });
    await again.kill();
    expect((await Sandbox.list({ ...opts(a) }).nextItems()).length).toBe(0);
  });

  it("a database that cannot be reached stops the start with a clear message and no password in it", async () => {
    const s = serve(dataDir(), ["--warm-pool", "0"], { LOCALE2B_DATABASE_URL: "postgresql://locale2b:hunter2@127.0.0.1:1/none", LOCALE2B_NO_IMAGE_BUILD: "1" });
    const err = await s.then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/cannot use the Postgres database at postgresql:\/\/locale2b:\*\*\*@127\.0\.0\.1:1\/none/);
    expect(err?.message).not.toContain("hunter2");
  });
});
