// The process runtime as root (sandbox mode: the template's root filesystem,
// namespaces, cgroups): isolation between sandboxes and from the host, cgroup
// limits, pause/resume, kill, re-adoption by a restarted control plane. The
// escapes themselves are tried in test/isolation. Needs root: skipped, with a
// message, when not.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { isRunning } from "../../control-plane/runtimes/process/procfs.js";
import {
  attach,
  cgroupFile,
  create,
  dataDir,
  envd,
  envdPid,
  isRoot,
  log,
  MiB,
  newId,
  ROOT,
  runtime,
  sleep,
  useProcessRuntime,
} from "../helpers/process-runtime.js";

useProcessRuntime(import.meta.url);

describe.skipIf(!isRoot)("process runtime (needs root: skipped when not root)", () => {
  beforeAll(async () => {
    const notes = await runtime.check();
    // eslint-disable-next-line no-console
    console.log(`process runtime check() on this host (mode ${(await runtime.capabilities()).mode}):\n${notes.map((n) => `  - ${n}`).join("\n") || "  (no missing isolation features)"}`);
  });

  it("probes the host: sandbox mode with cgroups", async () => {
    const caps = await runtime.capabilities();
    expect(caps.mode).toBe("sandbox");
    expect(caps.missing).toBeUndefined();
    expect(Array.isArray(await runtime.check())).toBe(true);
  });

  it("runs processes as `user` in /home/user, named after the sandbox, seeing only its own processes", async () => {
    const s = await create();
    expect(s.inst.defaultUser).toBe("user");
    expect(s.inst.defaultWorkdir).toBe("/home/user");
    expect(await s.sh("whoami")).toBe("user");
    expect(await s.sh("echo ~")).toBe("/home/user");
    expect(await s.sh("pwd")).toBe("/home/user");
    expect(await s.sh("hostname")).toBe(s.id);
    expect(await s.sh("whoami", "root")).toBe("root");
    expect(await s.sh("ls -ld /home/user | awk '{print $3}'")).toBe("user");
    // Its own pid namespace: pid 1 is the sandbox's init, and none of the host's processes show.
    const ps = (await s.sh("ps -e -o pid=,comm=")).split("\n").map((l) => l.trim().split(/\s+/));
    const pids = ps.map(([pid]) => Number(pid));
    expect(pids).toContain(1);
    expect(ps.find(([pid]) => pid === "1")?.[1]).toBe("locale2b-init");
    expect(pids.length).toBeLessThan(10);
    expect(pids.every((p) => p < 100)).toBe(true);
    expect(pids).not.toContain(process.pid);
    expect(ps.map(([, comm]) => comm)).not.toContain("vitest");
    // Its own /home: no other user's home.
    expect(await s.sh("ls -A /home")).toBe("user");
    // Its root filesystem is its own copy of the image: root writes anywhere, the host never sees it.
    expect(await s.sh("touch /usr/locale2b-inside && echo ok", "root")).toBe("ok");
    expect(existsSync("/usr/locale2b-inside")).toBe(false);
    expect(await s.sh("touch /home/user/f /tmp/f /dev/shm/f && echo ok")).toBe("ok");
    expect(await s.sh("touch /root/f && echo ok", "root")).toBe("ok");
  });

  it("keeps /tmp, /home/user, /dev/shm and the data dir private: other sandboxes and the host see nothing", async () => {
    const [a, b] = await Promise.all([create(), create()]);
    const name = `secret-${randomBytes(4).toString("hex")}`;
    await a.sh(`echo from-a > /tmp/${name} && echo home-a > ~/${name} && echo shm-a > /dev/shm/${name}`);
    expect(await a.sh(`cat /tmp/${name}`)).toBe("from-a");
    // B sees none of it.
    const inB = await b.exit(`ls /tmp/${name} ~/${name} /dev/shm/${name}`);
    expect(inB.code).not.toBe(0);
    expect(inB.stdout).toBe("");
    // Nor does the host's /tmp or /dev/shm; the file lives on A's own disk.
    expect(existsSync(join("/tmp", name))).toBe(false);
    expect(existsSync(join("/dev/shm", name))).toBe(false);
    expect(readFileSync(`/proc/${a.inst.initPid}/root/tmp/${name}`, "utf8")).toBe("from-a\n");
    // Neither sees the data dir at all: not its own directory, not the other's, not the control plane's files.
    expect((await a.exit(`ls -A ${join(dataDir, "sandboxes")}`, "root")).code).not.toBe(0);
    expect(await b.exit(`ls ${a.dir}`, "root")).toMatchObject({ stdout: "" });
    // Processes of one are invisible to the other.
    await a.sh("sleep 300 >/dev/null 2>&1 &");
    expect(await a.sh("ps -e -o comm=")).toContain("sleep");
    expect(await b.sh("ps -e -o comm=")).not.toContain("sleep");
  });

  it("applies cgroup limits (memory, CPU, pids) and accounts the sandbox's processes there", async () => {
    const s = await create({ memoryMB: 300, cpuCount: 1 });
    const cg = s.inst.cgroup;
    expect(cg, "this host has writable cgroups").toBeDefined();
    expect(Number(cgroupFile(s, ["memory", "memory.limit_in_bytes"], "memory.max"))).toBe(300 * MiB);
    expect(cgroupFile(s, ["pids", "pids.max"], "pids.max")).toBe("1024");
    if (cg!.kind === "v1") expect(cgroupFile(s, ["cpu", "cpu.cfs_quota_us"], "cpu.max")).toBe("100000");
    else expect(cgroupFile(s, ["cpu", ""], "cpu.max")).toBe("100000 100000");
    // Everything of the sandbox is in the group: the launcher, the init, envd and what envd starts.
    const pids = cg!.pids();
    expect(pids).toContain(s.inst.pid);
    expect(pids).toContain(envdPid(s));
    const inner = Number(await s.sh("sleep 60 >/dev/null 2>&1 & echo $!"));
    expect(inner).toBeGreaterThan(0);
    expect(cg!.pids().length).toBeGreaterThan(pids.length);
    // Stats come from the group.
    await s.sh("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done");
    const st = await s.inst.stats();
    expect(st.memUsedBytes).toBeGreaterThan(1 * MiB);
    expect(st.memTotalBytes).toBe(300 * MiB);
    expect(st.cpuCount).toBe(1);
    expect(st.cpuUsedPct).toBeGreaterThan(0);
    expect(st.cpuUsedPct).toBeLessThanOrEqual(100);
  });

  it("a warm-pool start runs at the lowest CPU share until claimed, then at the normal one", async () => {
    const s = await create({ background: true });
    const share = () => (s.inst.cgroup!.kind === "v1" ? cgroupFile(s, ["cpu", "cpu.shares"], "") : cgroupFile(s, ["cpu", ""], "cpu.weight"));
    expect(s.inst.cgroup, "this host has writable cgroups").toBeDefined();
    // Its whole start-up (launcher, init, envd) ran in the group at that share: real work always comes first.
    expect(share()).toBe(s.inst.cgroup!.kind === "v1" ? "2" : "1");
    expect(await s.sh("echo up")).toBe("up");
    s.inst.foreground();
    expect(share()).toBe(s.inst.cgroup!.kind === "v1" ? "1024" : "100");
  });

  it("pause freezes the sandbox and resume thaws it: running processes and files survive", async () => {
    const s = await create();
    await s.sh("echo kept > ~/kept.txt");
    // A counter in the sandbox, read from the host through the sandbox's root as its init sees it.
    await s.sh("nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i >> /tmp/counter; sleep 0.02; done' >/dev/null 2>&1 &");
    // Appended lines, not a rewritten number: a read never catches the file half-written.
    const file = `/proc/${s.inst.initPid}/root/tmp/counter`;
    let last = 0;
    const counter = () => {
      try {
        last = readFileSync(file, "utf8").split("\n").length - 1;
      } catch {
        // not there yet
      }
      return last;
    };
    await expect.poll(counter).toBeGreaterThan(0);

    await s.inst.pause();
    if (s.inst.cgroup?.canFreeze) expect(s.inst.cgroup.frozen()).toBe(true);
    const c1 = counter();
    await sleep(400);
    expect(counter()).toBe(c1);
    // envd is frozen too: a request does not complete.
    await expect(envd.request(s.endpoint, { method: "GET", path: "/health", timeoutMs: 300 })).rejects.toThrow(/in time/);
    expect(await s.inst.alive()).toBe(true);

    await s.inst.resume();
    if (s.inst.cgroup?.canFreeze) expect(s.inst.cgroup.frozen()).toBe(false);
    await expect.poll(counter).toBeGreaterThan(c1);
    expect(await s.sh("cat ~/kept.txt")).toBe("kept");
  });

  it("kill stops every process, removes the cgroup and the sandbox's files", async () => {
    const s = await create();
    await s.sh("sleep 300 >/dev/null 2>&1 &");
    const pids = s.inst.pids();
    expect(pids.length).toBeGreaterThanOrEqual(4);
    const rec = s.inst.cgroup?.record;
    // A paused sandbox can be killed: frozen processes die too.
    await s.inst.pause();
    await s.inst.kill();
    expect(await s.inst.alive()).toBe(false);
    for (const p of pids) expect(isRunning(p), `pid ${p} still runs`).toBe(false);
    if (rec?.kind === "v1") for (const dir of Object.values(rec.dirs)) expect(existsSync(dir!)).toBe(false);
    if (rec?.kind === "v2") expect(existsSync(rec.dir)).toBe(false);
    expect(existsSync(s.dir)).toBe(false);
    await s.inst.kill(); // idempotent
  });

  it("a new runtime re-adopts running sandboxes (a paused one stays paused) and refuses dead or foreign pids", async () => {
    const a = await create();
    await a.sh("echo before > ~/note");
    const b = await create();
    await b.inst.pause();

    // A "restarted control plane": a fresh runtime, pool and client, from the persisted data only.
    const restarted = new ProcessRuntime();
    const persistedA = JSON.parse(JSON.stringify(a.inst.persisted)) as Record<string, unknown>;
    const persistedB = JSON.parse(JSON.stringify(b.inst.persisted)) as Record<string, unknown>;
    const adoptedA = await restarted.adopt(a.id, a.dir, persistedA, log);
    expect(adoptedA).toBeDefined();
    expect(adoptedA!.defaultUser).toBe("user");
    a.endpoint.drop();
    const a2 = await attach(a.id, a.dir, adoptedA!, false);
    a2.token = a.token;
    expect(await a2.sh("cat ~/note && whoami")).toBe("before\nuser");

    const adoptedB = await restarted.adopt(b.id, b.dir, persistedB, log);
    expect(adoptedB).toBeDefined();
    if (adoptedB!.cgroup?.canFreeze) expect(adoptedB!.cgroup.frozen()).toBe(true);
    await expect(envd.request(b.endpoint, { method: "GET", path: "/health", timeoutMs: 300 })).rejects.toThrow();
    await adoptedB!.resume();
    b.endpoint.drop();
    const b2 = await attach(b.id, b.dir, adoptedB!, false);
    b2.token = b.token;
    expect(await b2.sh("whoami")).toBe("user");

    // Killed while "the control plane was down": adopt says it is gone and releases its cgroup.
    const c = await create();
    const persistedC = c.inst.persisted;
    const cgC = c.inst.cgroup;
    process.kill(c.inst.pid, "SIGKILL");
    await expect.poll(() => isRunning(c.inst.pid), { timeout: 5_000 }).toBe(false);
    expect(await restarted.adopt(c.id, c.dir, persistedC, log)).toBeUndefined();
    if (cgC) expect(cgC.exists()).toBe(false);

    // A live pid that is not this sandbox's (a recycled pid) is not adopted.
    expect(await restarted.adopt(a.id, a.dir, { ...persistedA, pid: process.pid, startTime: undefined, cgroup: null }, log)).toBeUndefined();
    expect(await restarted.adopt("other", join(dataDir, "sandboxes", "other"), { ...persistedA, cgroup: null }, log)).toBeUndefined();
    expect(await a2.sh("echo still-here")).toBe("still-here");

    await adoptedA!.kill();
    await adoptedB!.kill();
    expect(isRunning(a.inst.pid)).toBe(false);
  });

  it("sandboxes outlive the control plane that created them (not its children) and are re-adopted", async () => {
    const id = newId();
    const dir = join(dataDir, "sandboxes", id);
    mkdirSync(dir, { recursive: true });
    // A control plane in its own process creates a sandbox, then dies by SIGKILL.
    const script = `
      const { ProcessRuntime } = await import(${JSON.stringify(join(ROOT, "dist/control-plane/runtimes/process/process-runtime.js"))});
      const quiet = { debug() {}, info() {}, warn() {}, error() {}, child() { return quiet; } };
      const inst = await new ProcessRuntime().create({ sandboxId: ${JSON.stringify(id)}, templateId: "base", cpuCount: 1,
        memoryMB: 256, diskSizeMB: 1024, dir: ${JSON.stringify(dir)}, allowInternetAccess: true, log: quiet });
      process.stdout.write(JSON.stringify(inst.persisted) + "\\n", () => process.kill(process.pid, "SIGKILL"));
    `;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 });
    expect(r.signal).toBe("SIGKILL");
    const persisted = JSON.parse(r.stdout.trim()) as Record<string, unknown>;
    const adopted = await runtime.adopt(id, dir, persisted, log);
    expect(adopted, "the sandbox survived its control plane").toBeDefined();
    const s = await attach(id, dir, adopted!);
    expect(await s.sh("whoami && hostname")).toBe(`user\n${id}`);
    await adopted!.kill();
  });

  it("a sandbox outlives envd (its init restarts it), and reports through onExit when its init dies", async () => {
    const s = await create();
    const reasons: string[] = [];
    s.inst.onExit((r) => reasons.push(r));
    const first = envdPid(s);
    process.kill(first, "SIGKILL");
    await expect.poll(() => envdPid(s) !== first && s.sh("echo back").catch(() => ""), { timeout: 10_000 }).toBeTruthy();
    expect(await s.sh("echo back")).toBe("back");
    expect(reasons).toEqual([]);
    process.kill(s.inst.initPid!, "SIGKILL");
    await expect.poll(() => reasons.length, { timeout: 5_000 }).toBe(1);
    expect(reasons[0]).toMatch(/init|killed/);
    expect(await s.inst.alive()).toBe(false);
    if (s.inst.cgroup) await expect.poll(() => s.inst.cgroup!.exists(), { timeout: 5_000 }).toBe(false);

    const t = await create();
    const adopted = await new ProcessRuntime().adopt(t.id, t.dir, t.inst.persisted, log);
    const adoptedReasons: string[] = [];
    adopted!.onExit((r) => adoptedReasons.push(r));
    process.kill(t.inst.initPid!, "SIGKILL");
    await expect.poll(() => adoptedReasons.length, { timeout: 5_000 }).toBe(1);
    expect(await adopted!.alive()).toBe(false);
    // A listener added after the death still hears of it, once.
    const late: string[] = [];
    adopted!.onExit((r) => late.push(r));
    await expect.poll(() => late.length).toBe(1);
  });

  it("gives every sandbox its own network namespace: only loopback without internet access, eth0 with it", async () => {
    const caps = await runtime.capabilities();
    const off = await create({ allowInternetAccess: false });
    const on = await create();
    const ifaces = (text: string) =>
      text
        .split("\n")
        .slice(2)
        .map((l) => l.split(":")[0]!.trim())
        .filter(Boolean);
    expect(ifaces(await off.sh("cat /proc/net/dev"))).toEqual(["lo"]);
    expect(await off.sh("ip -o link show lo")).toMatch(/[<,]UP[,>]/);
    expect(ifaces(await on.sh("cat /proc/net/dev")).sort()).toEqual(caps.noVeth ? ["lo"] : ["eth0", "lo"]);
  });

  it("works with a data dir under /tmp (the sandbox sees none of it)", async () => {
    const data = mkdtempSync(join(tmpdir(), "locale2b-prt-tmp-"));
    try {
      const s = await create({ data });
      expect(await s.sh("whoami")).toBe("user");
      expect((await s.exit(`ls -A ${join(data, "sandboxes")}`, "root")).code).not.toBe(0);
      await s.inst.kill();
    } finally {
      rmSync(data, { recursive: true, force: true });
    }
  });
});
