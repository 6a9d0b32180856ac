// The real `e2b` JS SDK against a real control plane (startTestControlPlane,
// process runtime), configured only by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY: the sandbox lifecycle through the REST API, auth, metrics and
// isolation. Commands, PTY and files through the envd proxy are in
// e2b-js-control-plane-envd.test.ts.
import { AuthenticationError, Sandbox, SandboxNotFoundError, TimeoutError, type SandboxInfo, type SandboxListOpts } from "e2b";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { rejection, setEnv, waitFor } from "../helpers/sdk.js";

let cp: TestControlPlane;
let restoreEnv = () => {};
/** Sandboxes created by the current test, killed after it. */
let created: string[] = [];
let n = 0;

beforeAll(async () => {
  cp = await startTestControlPlane();
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
});
afterEach(async () => {
  await Promise.all(created.map((id) => Sandbox.kill(id).catch(() => false)));
  created = [];
});
afterAll(async () => {
  restoreEnv();
  await cp?.close();
});

const unique = (what: string) => `${what}-${process.pid}-${n++}`;

async function create(opts?: Parameters<typeof Sandbox.create>[1]): Promise<Sandbox> {
  const sbx = await Sandbox.create("base", opts);
  created.push(sbx.sandboxId);
  return sbx;
}

/** All sandbox ids the query lists, paging through. */
async function listedIds(opts?: SandboxListOpts): Promise<Set<string>> {
  const ids = new Set<string>();
  const pager = Sandbox.list(opts);
  while (pager.hasNext) for (const s of await pager.nextItems()) ids.add(s.sandboxId);
  return ids;
}

/** Within `seconds` of each other (clock skew and a loaded machine, not timing). */
/**
 * `at` lies between two clock reads taken around the call that set it
 * (shifted by `offsetMs`): true however slow the machine is. 1 s of slack
 * below for the server's rounding.
 */
function between(at: Date, before: number, after: number, offsetMs = 0): boolean {
  return at.getTime() >= before + offsetMs - 1_000 && at.getTime() <= after + offsetMs;
}

const accessToken = (sbx: Sandbox) => (sbx as unknown as { envdAccessToken?: string }).envdAccessToken;

describe("create and getInfo", () => {
  it("creates with metadata, envs and timeout, and getInfo returns them", async () => {
    const tag = unique("create");
    const before = Date.now();
    const sbx = await create({ metadata: { suite: "js-cp", tag }, envs: { GREETING: "hi there", EMPTY: "" }, timeoutMs: 123_000 });
    const after = Date.now();
    expect(sbx.sandboxId).toMatch(/^[a-z0-9]+$/);
    expect(await sbx.isRunning()).toBe(true);
    // The create envs are the sandbox's: every command sees them.
    expect((await sbx.commands.run('echo "$GREETING|${EMPTY-unset}|"')).stdout).toBe("hi there||\n");

    const info: SandboxInfo = await sbx.getInfo();
    expect(info).toMatchObject({ sandboxId: sbx.sandboxId, templateId: "base", state: "running", metadata: { suite: "js-cp", tag } });
    expect(info.startedAt).toBeInstanceOf(Date);
    expect(info.endAt).toBeInstanceOf(Date);
    expect(between(info.startedAt, before, after)).toBe(true);
    // endAt = startedAt + the timeout.
    expect(Math.abs(info.endAt.getTime() - info.startedAt.getTime() - 123_000)).toBeLessThanOrEqual(5_000);
    expect(info.cpuCount).toBeGreaterThanOrEqual(1);
    expect(info.memoryMB).toBeGreaterThanOrEqual(1);
    expect(info.envdVersion).toMatch(/^\d+\.\d+\.\d+/);
    // The static form answers the same.
    expect(await Sandbox.getInfo(sbx.sandboxId)).toMatchObject({ sandboxId: sbx.sandboxId, metadata: { suite: "js-cp", tag } });
  });

  it("defaults to no metadata and a 300 s timeout", async () => {
    const sbx = await create();
    const info = await sbx.getInfo();
    expect(info.metadata).toEqual({});
    expect(Math.abs(info.endAt.getTime() - info.startedAt.getTime() - 300_000)).toBeLessThanOrEqual(5_000);
  });
});

describe("list", () => {
  it("filters by metadata and state, and pages", async () => {
    const tag = unique("list");
    const [a, b, other] = await Promise.all([
      create({ metadata: { tag, role: "a", "k y": "v&1=2" } }),
      create({ metadata: { tag, role: "b" } }),
      create({ metadata: { tag: unique("other") } }),
    ]);
    expect(await listedIds({ query: { metadata: { tag } } })).toEqual(new Set([a.sandboxId, b.sandboxId]));
    expect(await listedIds({ query: { metadata: { tag, role: "b" } } })).toEqual(new Set([b.sandboxId]));
    expect(await listedIds({ query: { metadata: { "k y": "v&1=2" } } })).toEqual(new Set([a.sandboxId]));
    expect([...(await listedIds())]).toEqual(expect.arrayContaining([a.sandboxId, b.sandboxId, other.sandboxId]));

    const [first] = await Sandbox.list({ query: { metadata: { tag, role: "a" } } }).nextItems();
    expect(first).toMatchObject({ sandboxId: a.sandboxId, templateId: "base", state: "running", metadata: { tag, role: "a", "k y": "v&1=2" } });
    expect(first.startedAt).toBeInstanceOf(Date);
    expect(first.endAt).toBeInstanceOf(Date);

    // Paging: limit 2 over two matches and a third one.
    const third = await create({ metadata: { tag } });
    const pager = Sandbox.list({ query: { metadata: { tag } }, limit: 2 });
    const page1 = await pager.nextItems();
    expect(page1.length).toBe(2);
    expect(pager.hasNext).toBe(true);
    expect(pager.nextToken).toBeTruthy();
    const page2 = await pager.nextItems();
    expect(page2.length).toBe(1);
    expect(pager.hasNext).toBe(false);
    expect(new Set([...page1, ...page2].map((s) => s.sandboxId))).toEqual(new Set([a.sandboxId, b.sandboxId, third.sandboxId]));

    // States: paused ones are listed by default and under "paused" only.
    expect(await b.pause()).toBe(true);
    expect(await listedIds({ query: { metadata: { tag }, state: ["running"] } })).toEqual(new Set([a.sandboxId, third.sandboxId]));
    expect(await listedIds({ query: { metadata: { tag }, state: ["paused"] } })).toEqual(new Set([b.sandboxId]));
    expect(await listedIds({ query: { metadata: { tag } } })).toEqual(new Set([a.sandboxId, b.sandboxId, third.sandboxId]));
    const [paused] = await Sandbox.list({ query: { metadata: { tag, role: "b" } } }).nextItems();
    expect(paused).toMatchObject({ sandboxId: b.sandboxId, state: "paused" });
  });
});

describe("timeout, pause, connect, kill", () => {
  it("setTimeout moves endAt, both ways", async () => {
    const sbx = await create();
    let before = Date.now();
    await sbx.setTimeout(1_200_000);
    expect(between((await sbx.getInfo()).endAt, before, Date.now(), 1_200_000)).toBe(true);
    before = Date.now();
    await Sandbox.setTimeout(sbx.sandboxId, 90_000);
    const info = await sbx.getInfo();
    expect(between(info.endAt, before, Date.now(), 90_000)).toBe(true);
    expect(info.endAt.getTime()).toBeGreaterThan(info.startedAt.getTime());
  });

  it("connect resumes a paused sandbox with its files and background processes", async () => {
    const sbx = await create({ metadata: { tag: unique("pause") } });
    await sbx.files.write("/home/user/before-pause.txt", "kept across pause");
    const sleeper = await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    await sleeper.disconnect();

    expect(await sbx.pause()).toBe(true);
    expect(await sbx.isRunning()).toBe(false);
    expect((await Sandbox.getInfo(sbx.sandboxId)).state).toBe("paused");
    expect(await listedIds({ query: { state: ["paused"] } })).toContain(sbx.sandboxId);
    expect(await Sandbox.pause(sbx.sandboxId)).toBe(false); // already paused

    const resumed = await Sandbox.connect(sbx.sandboxId);
    expect(resumed.sandboxId).toBe(sbx.sandboxId);
    expect((await Sandbox.getInfo(sbx.sandboxId)).state).toBe("running");
    expect(await sbx.isRunning()).toBe(true);
    expect(await resumed.files.read("/home/user/before-pause.txt")).toBe("kept across pause");
    const procs = await resumed.commands.list();
    expect(procs.find((p) => p.pid === sleeper.pid)).toMatchObject({ pid: sleeper.pid, args: ["-l", "-c", "sleep 600"] });
    expect(await resumed.commands.kill(sleeper.pid)).toBe(true);
  });

  it("connect to a running sandbox gives a second working handle", async () => {
    const sbx = await create();
    await sbx.files.write("/home/user/from-first.txt", "first handle");
    const again = await Sandbox.connect(sbx.sandboxId);
    expect(again.sandboxId).toBe(sbx.sandboxId);
    expect(await again.files.read("/home/user/from-first.txt")).toBe("first handle");
    expect((await again.commands.run("echo via-connect")).stdout).toBe("via-connect\n");
  });

  it("kill: true once, then false; the sandbox is gone everywhere", async () => {
    const tag = unique("kill");
    const sbx = await create({ metadata: { tag } });
    const id = sbx.sandboxId;
    expect(await sbx.kill()).toBe(true);
    expect(await Sandbox.kill(id)).toBe(false);
    expect(await sbx.isRunning()).toBe(false);
    expect(await rejection(sbx.getInfo())).toBeInstanceOf(SandboxNotFoundError);
    expect(await rejection(Sandbox.getInfo(id))).toBeInstanceOf(SandboxNotFoundError);
    expect(await rejection(Sandbox.connect(id))).toBeInstanceOf(SandboxNotFoundError);
    expect(await rejection(sbx.commands.run("true"))).toBeInstanceOf(SandboxNotFoundError);
    // The proxy answers as E2B's does, so the SDK's error reads as on E2B.
    const read = await rejection(sbx.files.read("/etc/hostname"));
    expect(read).toBeInstanceOf(TimeoutError);
    expect((read as Error).message).toMatch(/^The sandbox was not found: This error is likely due to sandbox timeout/);
    expect(await listedIds({ query: { metadata: { tag } } })).toEqual(new Set());
  });

  it("a paused sandbox can be killed", async () => {
    const sbx = await create();
    expect(await sbx.pause()).toBe(true);
    expect(await Sandbox.kill(sbx.sandboxId)).toBe(true);
    expect(await rejection(Sandbox.getInfo(sbx.sandboxId))).toBeInstanceOf(SandboxNotFoundError);
  });

  it("getInfo of an unknown sandbox is SandboxNotFoundError", async () => {
    expect(await rejection(Sandbox.getInfo("doesnotexist0000000000"))).toBeInstanceOf(SandboxNotFoundError);
  });
});

describe("auth", () => {
  const wrongKey = `e2b_${"0".repeat(40)}`;

  it("a wrong API key is AuthenticationError on create, list and getInfo", async () => {
    expect(await rejection(Sandbox.create("base", { apiKey: wrongKey }))).toBeInstanceOf(AuthenticationError);
    expect(await rejection(Sandbox.list({ apiKey: wrongKey }).nextItems())).toBeInstanceOf(AuthenticationError);
    expect(await rejection(Sandbox.getInfo("whatever", { apiKey: wrongKey }))).toBeInstanceOf(AuthenticationError);
    // Nothing was created by the rejected call.
    expect((await Sandbox.list().nextItems()).map((s) => s.sandboxId).filter((id) => !created.includes(id))).toEqual([]);
    const res = await fetch(`${cp.url}/v2/sandboxes`, { headers: { "X-API-Key": wrongKey } });
    expect(res.status).toBe(401);
  });

  it("a wrong envd access token is AuthenticationError in the SDK and 401 on the wire", async () => {
    const sbx = await create();
    const token = accessToken(sbx);
    expect(token, "create must return an envdAccessToken").toBeTruthy();
    const { envdVersion } = await sbx.getInfo();
    // The same sandbox, through an SDK object holding a wrong token.
    const bad = new Sandbox({ sandboxId: sbx.sandboxId, envdVersion, envdAccessToken: "wrong-token" });
    const calls: [string, () => Promise<unknown>][] = [
      ["commands.run", () => bad.commands.run("echo should-not-run")],
      ["commands.list", () => bad.commands.list()],
      ["files.read", () => bad.files.read("/etc/hostname")],
      ["files.write", () => bad.files.write("/home/user/nope.txt", "x")],
      ["files.list", () => bad.files.list("/home/user")],
    ];
    for (const [what, call] of calls) {
      const err = await rejection(call());
      expect({ what, auth: err instanceof AuthenticationError, name: err.name }).toEqual({ what, auth: true, name: "AuthenticationError" });
    }
    expect(await sbx.files.exists("/home/user/nope.txt")).toBe(false);

    // Plain HTTP with the routing headers: the right token works, a wrong or missing one is 401.
    const rpc = `${cp.url}/process.Process/List`;
    const base = { "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": "49983", "Content-Type": "application/json", "Connect-Protocol-Version": "1" };
    const ok = await fetch(rpc, { method: "POST", body: "{}", headers: { ...base, "X-Access-Token": token! } });
    expect(ok.status).toBe(200);
    for (const headers of [{ ...base, "X-Access-Token": "wrong" }, base]) {
      expect((await fetch(rpc, { method: "POST", body: "{}", headers })).status).toBe(401);
      expect((await fetch(`${cp.url}/files?path=/etc/hostname`, { headers })).status).toBe(401);
    }
    // Another sandbox's token does not open this one.
    const other = await create();
    const cross = await fetch(rpc, { method: "POST", body: "{}", headers: { ...base, "X-Access-Token": accessToken(other)! } });
    expect(cross.status).toBe(401);
    // /health needs no token.
    const health = await fetch(`${cp.url}/health`, { headers: { "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": "49983" } });
    expect(health.status).toBe(204);
  });
});

describe("metrics", () => {
  it("getMetrics returns at least one sample with cpuCount and memTotal", async () => {
    const sbx = await create();
    let metrics = await sbx.getMetrics();
    await waitFor(async () => (metrics = await sbx.getMetrics()).length > 0, () => `a metric, got ${JSON.stringify(metrics)}`);
    const m = metrics[metrics.length - 1];
    expect(m.timestamp).toBeInstanceOf(Date);
    expect(m.cpuCount).toBeGreaterThanOrEqual(1);
    expect(m.memTotal).toBeGreaterThan(0);
    expect(m.memUsed).toBeGreaterThanOrEqual(0);
    expect(m.cpuUsedPct).toBeGreaterThanOrEqual(0);
    expect((await Sandbox.getMetrics(sbx.sandboxId)).length).toBeGreaterThan(0);
  });
});

describe("isolation", () => {
  it("8 sandboxes created in parallel each see only their own files in /home/user and /tmp", { timeout: 300_000 }, async () => {
    const tag = unique("parallel");
    const boxes = await Promise.all(Array.from({ length: 8 }, (_, i) => create({ metadata: { tag, i: String(i) } })));
    expect(new Set(boxes.map((b) => b.sandboxId)).size).toBe(8);
    expect(await listedIds({ query: { metadata: { tag } } })).toEqual(new Set(boxes.map((b) => b.sandboxId)));

    await Promise.all(
      boxes.map(async (b, i) => {
        await b.files.write(`/home/user/mine-${i}.txt`, `home ${i}\n`);
        await b.commands.run(`echo tmp ${i} > /tmp/mine-${i}.txt`);
      }),
    );
    const seen = await Promise.all(
      boxes.map(async (b) => {
        const ls = async (dir: string) =>
          (await b.commands.run(`ls -1A ${dir}`)).stdout.split("\n").filter((name) => name.startsWith("mine-"));
        const { stdout } = await b.commands.run("cat /home/user/mine-*.txt /tmp/mine-*.txt");
        return { home: await ls("/home/user"), tmp: await ls("/tmp"), cat: stdout };
      }),
    );
    seen.forEach((s, i) => {
      expect(s).toEqual({ home: [`mine-${i}.txt`], tmp: [`mine-${i}.txt`], cat: `home ${i}\ntmp ${i}\n` });
    });
  });
});
