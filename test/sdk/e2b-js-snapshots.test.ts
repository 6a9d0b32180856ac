// E2B's snapshots and fork with the real `e2b` JS SDK against a real control
// plane on the process runtime (filesystem-only snapshots: the writable
// layer's image): create/list/page/delete, sandboxes from a snapshot and
// forks (their files, fresh processes, their own id, token, hostname, envs
// and metadata), bad input, a snapshot under a busy writer, and isolation.
// Every REST answer is checked against E2B's OpenAPI spec. Needs root.
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { Sandbox, SandboxNotFoundError, Template, type SnapshotInfo } from "e2b";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { uplinkAddress } from "../helpers/egress.js";
import { CONTROL_PLANE_SPEC, specAvailable, validatorFor } from "../helpers/openapi.js";
import { rejection, setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;
const HAVE_SPEC = specAvailable(CONTROL_PLANE_SPEC);

let cp: TestControlPlane;
let restoreEnv = () => {};
let created: string[] = [];
let n = 0;
const unique = (what: string) => `${what}-${process.pid}-${n++}`;
const token = (s: Sandbox) => (s as unknown as { envdAccessToken?: string }).envdAccessToken ?? "";

beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime });
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

async function create(template = "base", opts?: Parameters<typeof Sandbox.create>[1]): Promise<Sandbox> {
  const sbx = await Sandbox.create(template, { timeoutMs: 600_000, ...opts });
  created.push(sbx.sandboxId);
  return sbx;
}

async function sh(s: Sandbox, command: string, user?: "root" | "user"): Promise<{ code: number; out: string }> {
  try {
    const r = await s.commands.run(command, { ...(user ? { user } : {}), timeoutMs: 120_000 });
    return { code: r.exitCode, out: `${r.stdout}${r.stderr}` };
  } catch (err) {
    const e = err as { exitCode?: number; stdout?: string; stderr?: string; message: string };
    return { code: e.exitCode ?? -1, out: `${e.stdout ?? ""}${e.stderr ?? e.message}` };
  }
}

/** A REST call with the test's key; the JSON body, status and headers. */
async function api(method: string, path: string, body?: string): Promise<{ status: number; json: unknown; headers: Headers }> {
  const res = await fetch(`${cp.url}${path}`, {
    method,
    headers: { "x-api-key": cp.apiKey, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined, headers: res.headers };
}

function expectSchema(name: string, data: unknown): void {
  if (!HAVE_SPEC) return;
  const v = validatorFor(CONTROL_PLANE_SPEC, `#/components/schemas/${name}`);
  expect(v(data), `${name}: ${v.errorText}`).toBe(true);
}

async function allSnapshots(opts?: Parameters<typeof Sandbox.listSnapshots>[0]): Promise<SnapshotInfo[]> {
  const out: SnapshotInfo[] = [];
  const pager = Sandbox.listSnapshots(opts);
  while (pager.hasNext) out.push(...(await pager.nextItems()));
  return out;
}

describe.skipIf(skip !== undefined)(`snapshots${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("create, list (filtered and paged), create a sandbox from it, delete", async () => {
    const src = await create("base", { envs: { ORIGIN: "parent" }, metadata: { role: "parent" } });
    await src.files.write("/home/user/project/notes.txt", "kept in the snapshot\n");
    await sh(src, "echo root-file > /etc/snapshot-marker", "root");
    // A process of the source: a snapshot holds files, not processes.
    await src.commands.run("sleep 600", { background: true, timeoutMs: 0 });

    const raw = await api("POST", `/sandboxes/${src.sandboxId}/snapshots`, "{}");
    expect(raw.status).toBe(201);
    expectSchema("SnapshotInfo", raw.json);
    const info = await Sandbox.createSnapshot(src.sandboxId);
    expect(info.snapshotId).toMatch(/^[a-z0-9]+:default$/);
    expect(info.names).toEqual([]);
    // The source keeps running, its process too.
    expect((await sh(src, "pgrep -x sleep")).code).toBe(0);

    const listed = await api("GET", `/snapshots?sandboxID=${src.sandboxId}`);
    expect(listed.status).toBe(200);
    for (const s of listed.json as unknown[]) expectSchema("SnapshotInfo", s);
    expect((listed.json as { snapshotID: string }[]).map((s) => s.snapshotID)).toEqual([info.snapshotId, (raw.json as { snapshotID: string }).snapshotID]);
    // Paged one at a time through X-Next-Token, newest first.
    const paged: string[] = [];
    const pager = Sandbox.listSnapshots({ sandboxId: src.sandboxId, limit: 1 });
    while (pager.hasNext) paged.push(...(await pager.nextItems()).map((s) => s.snapshotId));
    expect(paged).toEqual([info.snapshotId, (raw.json as { snapshotID: string }).snapshotID]);
    expect((await allSnapshots({ name: info.snapshotId.split(":")[0] })).map((s) => s.snapshotId)).toEqual([info.snapshotId]);

    const child = await create(info.snapshotId, { envs: { ORIGIN: "child" }, metadata: { role: "child" } });
    expect(child.sandboxId).not.toBe(src.sandboxId);
    expect(token(child)).not.toBe(token(src));
    expect(await child.files.read("/home/user/project/notes.txt")).toBe("kept in the snapshot\n");
    expect((await sh(child, "cat /etc/snapshot-marker")).out).toBe("root-file\n");
    // Fresh processes, its own name, envs and metadata.
    expect((await sh(child, "pgrep -x sleep")).code).toBe(1);
    expect((await sh(child, "hostname; cat /etc/hostname; grep -c " + child.sandboxId + " /etc/hosts")).out).toBe(`${child.sandboxId}\n${child.sandboxId}\n1\n`);
    expect((await sh(child, "echo $ORIGIN")).out).toBe("child\n");
    expect((await child.getInfo()).metadata).toEqual({ role: "child" });
    // Its files are its own: the source does not see the child's writes.
    await child.files.write("/home/user/project/child.txt", "mine");
    expect(await src.files.exists("/home/user/project/child.txt")).toBe(false);

    // Deleting a snapshot in use by a running sandbox leaves that sandbox alone.
    expect(await Sandbox.deleteSnapshot(info.snapshotId)).toBe(true);
    expect(await Sandbox.deleteSnapshot(info.snapshotId)).toBe(false);
    expect((await sh(child, "cat /home/user/project/notes.txt && echo still-here > /tmp/x && cat /tmp/x")).out).toBe("kept in the snapshot\nstill-here\n");
    expect((await allSnapshots({ sandboxId: src.sandboxId })).map((s) => s.snapshotId)).toEqual([(raw.json as { snapshotID: string }).snapshotID]);
    expect(await Sandbox.deleteSnapshot((raw.json as { snapshotID: string }).snapshotID)).toBe(true);
    // Nothing of them stays on disk.
    expect(readdirSync(join(cp.dataDir, "snapshots"))).toEqual([]);
  });

  it("named snapshots resolve as E2B's do (name, namespace/name, :tag); the same name gets the new build", async () => {
    const src = await create();
    const name = unique("snap");
    await src.files.write("/home/user/v.txt", "one");
    const first = await Sandbox.createSnapshot(src.sandboxId, { name });
    expect(first).toEqual({ snapshotId: `local/${name}:default`, names: [`local/${name}:default`] });
    await src.files.write("/home/user/v.txt", "two");
    const second = await Sandbox.createSnapshot(src.sandboxId, { name });
    expect(second.snapshotId).toBe(first.snapshotId);
    expect((await allSnapshots({ name })).map((s) => s.snapshotId)).toEqual([first.snapshotId]);
    const tagged = await Sandbox.createSnapshot(src.sandboxId, { name: `${name}:v1` });
    expect(tagged.snapshotId).toBe(`local/${name}:v1`);
    expect((await allSnapshots({ name })).length).toBe(2);
    expect((await allSnapshots({ name: `${name}:v1` })).map((s) => s.snapshotId)).toEqual([tagged.snapshotId]);

    for (const ref of [name, `local/${name}`, `${name}:default`]) {
      const s = await create(ref);
      expect(await s.files.read("/home/user/v.txt")).toBe("two");
    }
    // Template.exists (GET /templates/aliases/{alias}): the built template and a snapshot's name; not what is gone.
    expect(await Template.exists("base")).toBe(true);
    expect(await Template.exists(name)).toBe(true);
    expect(await Template.exists(unique("no-such-template"))).toBe(false);
    const base = await api("GET", "/templates/aliases/base");
    expect(base.status).toBe(200);
    expect(base.json).toEqual({ templateID: "base", public: true });
    expectSchema("TemplateAliasResponse", base.json);
    const snap = await api("GET", `/templates/aliases/${encodeURIComponent(name)}`);
    expect(snap.json).toEqual({ templateID: first.snapshotId, public: false });
    expectSchema("TemplateAliasResponse", snap.json);

    expect(await Sandbox.deleteSnapshot(`local/${name}:v1`)).toBe(true);
    expect(await Sandbox.deleteSnapshot(name)).toBe(true);
    expect(await allSnapshots({ name })).toEqual([]);
    expect(await Template.exists(name)).toBe(false);
    const gone = await api("GET", `/templates/aliases/${encodeURIComponent(name)}`);
    expect(gone.status).toBe(404);
    expect((gone.json as { message: string }).message).toContain("not found");
  });

  it("fork of 3: distinct ids and tokens, the parent's files, metadata and envs, fresh processes; the parent runs on", async () => {
    const parent = await create("base", { envs: { FROM: "parent" }, metadata: { team: "forks" } });
    await parent.files.write("/home/user/state.json", '{"step":7}');
    await parent.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    const raw = await api("POST", `/sandboxes/${parent.sandboxId}/fork`, JSON.stringify({ count: 1, timeout: 120 }));
    expect(raw.status).toBe(201);
    expect((raw.json as unknown[]).length).toBe(1);
    for (const r of raw.json as unknown[]) expectSchema("SandboxForkResult", r);
    created.push(...(raw.json as { sandbox: { sandboxID: string } }[]).map((r) => r.sandbox.sandboxID));

    const forks = await Sandbox.fork(parent.sandboxId, { count: 3, timeoutMs: 300_000 });
    expect(forks.length).toBe(3);
    const sandboxes = forks.map((f) => {
      if (!(f instanceof Sandbox)) throw f;
      created.push(f.sandboxId);
      return f;
    });
    const ids = new Set([parent.sandboxId, ...sandboxes.map((s) => s.sandboxId)]);
    expect(ids.size).toBe(4);
    expect(new Set([token(parent), ...sandboxes.map(token)]).size).toBe(4);
    for (const s of sandboxes) {
      expect(await s.files.read("/home/user/state.json")).toBe('{"step":7}');
      expect((await sh(s, "echo $FROM; hostname; pgrep -x sleep || echo none")).out).toBe(`parent\n${s.sandboxId}\nnone\n`);
      expect((await s.getInfo()).metadata).toEqual({ team: "forks" });
    }
    await sandboxes[0]!.files.write("/home/user/state.json", "changed");
    expect(await sandboxes[1]!.files.read("/home/user/state.json")).toBe('{"step":7}');
    expect(await parent.files.read("/home/user/state.json")).toBe('{"step":7}');
    expect((await sh(parent, "pgrep -x sleep >/dev/null && echo alive")).out).toBe("alive\n");
    // A fork's capture is not kept as a snapshot.
    expect(await allSnapshots({ sandboxId: parent.sandboxId })).toEqual([]);
  });

  it("a snapshot taken while a process writes files leaves the writer running and gives a consistent copy", async () => {
    const src = await create();
    const writer = `mkdir -p /home/user/w; i=0; while true; do i=$((i+1)); printf '%s\\n' "$i" > /home/user/w/tmp && mv /home/user/w/tmp /home/user/w/$i; echo $i > /home/user/w/last.tmp && mv /home/user/w/last.tmp /home/user/w/last; done`;
    await src.commands.run(writer, { background: true, timeoutMs: 0 });
    await sh(src, "for i in $(seq 100); do [ -s /home/user/w/last ] && break; sleep 0.1; done");
    const snaps: SnapshotInfo[] = [];
    try {
      for (let i = 0; i < 3; i++) snaps.push(await Sandbox.createSnapshot(src.sandboxId));
      // (`last` is replaced by a rename, never truncated: a read sees a whole number.)
      const before = Number((await sh(src, "cat /home/user/w/last")).out);
      await sh(src, `for i in $(seq 200); do [ "$(cat /home/user/w/last)" -gt ${before} ] && break; sleep 0.1; done`);
      expect(Number((await sh(src, "cat /home/user/w/last")).out)).toBeGreaterThan(before);
      for (const snap of snaps) {
        const copy = await create(snap.snapshotId);
        // Every numbered file is whole and holds its own number.
        const check = await sh(copy, "cd /home/user/w && ls | grep -E '^[0-9]+$' | while read f; do [ \"$(cat $f)\" = \"$f\" ] || echo bad $f; done; echo checked");
        expect(check.out).toBe("checked\n");
        await copy.kill();
      }
    } finally {
      await Promise.all(snaps.map((s) => Sandbox.deleteSnapshot(s.snapshotId)));
    }
  });

  it("a sandbox from another's snapshot cannot reach that sandbox or the host, and the snapshot holds no host files", async () => {
    const src = await create();
    await src.commands.run("python3 -m http.server 8121 --bind 0.0.0.0 --directory /tmp", { background: true, timeoutMs: 0 });
    await sh(src, "for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:8121/ && break; sleep 0.1; done");
    const snap = await Sandbox.createSnapshot(src.sandboxId);
    const build = readdirSync(join(cp.dataDir, "snapshots"));
    expect(build.length).toBe(1);
    // Only the writable layer's image and the template build it is a layer over, readable by the server alone.
    expect(readdirSync(join(cp.dataDir, "snapshots", build[0]!)).sort()).toEqual([".image", "disk.img"]);
    expect(statSync(join(cp.dataDir, "snapshots", build[0]!)).mode & 0o077).toBe(0);
    const child = await create(snap.snapshotId);
    const srcAddr = /inet (\S+)\//.exec((await sh(src, "ip -4 -o addr show eth0")).out)![1]!;
    const port = new URL(cp.url).port;
    const gw = /default via (\S+)/.exec((await sh(child, "ip route show default")).out)![1]!;
    const host = uplinkAddress();
    for (const user of ["user", "root"] as const) {
      expect((await sh(child, `curl -s -m 5 http://${srcAddr}:8121/`, user)).code, user).not.toBe(0);
      expect((await sh(child, "curl -s -m 5 http://127.0.0.1:8121/", user)).code, user).not.toBe(0);
      for (const t of [`${gw}:${port}`, `127.0.0.1:${port}`, ...(host ? [`${host}:${port}`] : [])]) {
        expect((await sh(child, `curl -s -m 5 -o /dev/null http://${t}/health`, user)).code, `${user} → ${t}`).not.toBe(0);
      }
    }
    // The host's tree is nowhere in it: not the data dir, not this checkout.
    expect((await sh(child, `ls ${cp.dataDir} ${process.cwd()} 2>&1; ls /proc/1/root/${cp.dataDir} 2>&1`, "root")).out).toMatch(/No such file/);
    expect((await sh(child, `test -e ${join(process.cwd(), "package.json")} && echo leaked || echo none`, "root")).out).toBe("none\n");
    await Sandbox.deleteSnapshot(snap.snapshotId);
  });
});

describe.skipIf(skip !== undefined)(`bad input gets the right status${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("unknown sandbox, unknown snapshot, bad count or timeout, bad names, malformed JSON", async () => {
    expect(await rejection(Sandbox.createSnapshot("nosuchsandbox"))).toBeInstanceOf(SandboxNotFoundError);
    expect(await rejection(Sandbox.fork("nosuchsandbox"))).toBeInstanceOf(SandboxNotFoundError);
    expect(await Sandbox.deleteSnapshot("nosuchsnapshot:default")).toBe(false);
    const missing = await api("POST", "/v2/sandboxes", JSON.stringify({ templateID: "nosuchsnapshot:default" }));
    expect(missing.status).toBe(404);
    expectSchema("Error", missing.json);
    expect(await rejection(Sandbox.create("nosuchsnapshot"))).toBeInstanceOf(Error);

    const src = await create();
    const bad: [string, string, number, RegExp][] = [
      ["fork", JSON.stringify({ count: 0 }), 400, /count.*between 1 and 100/],
      ["fork", JSON.stringify({ count: 101 }), 400, /count.*between 1 and 100/],
      ["fork", JSON.stringify({ count: "3" }), 400, /count.*integer/],
      ["fork", JSON.stringify({ timeout: 0 }), 400, /timeout/],
      ["fork", "{not json", 400, /invalid JSON/],
      ["snapshots", "{not json", 400, /invalid JSON/],
      ["snapshots", JSON.stringify({ name: "Has Spaces" }), 400, /invalid snapshot name/],
      ["snapshots", JSON.stringify({ name: "other/x" }), 400, /namespace/],
      ["snapshots", JSON.stringify({ name: "base" }), 400, /template is named 'base'/],
      ["snapshots", JSON.stringify({ name: 7 }), 400, /name.*string/],
    ];
    for (const [what, body, status, message] of bad) {
      const r = await api("POST", `/sandboxes/${src.sandboxId}/${what}`, body);
      expect(r.status, `${what} ${body}`).toBe(status);
      expectSchema("Error", r.json);
      expect((r.json as { message: string }).message).toMatch(message);
    }
    expect((await api("GET", "/snapshots?limit=0")).status).toBe(400);
    expect((await api("GET", "/snapshots?nextToken=zzz")).status).toBe(400);
    expect((await api("DELETE", "/templates/base")).status).toBe(400);
    // Nothing half-made was left behind.
    expect(await allSnapshots({ sandboxId: src.sandboxId })).toEqual([]);
    expect(readdirSync(join(cp.dataDir, "snapshots"))).toEqual([]);
  });
});
