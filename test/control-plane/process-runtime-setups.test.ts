// The process runtime in other set-ups: run by an ordinary user (user
// namespaces), under a cgroup v2 parent, and without namespaces. Arranging them needs root: skipped, with a message, when not.
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { isRunning } from "../../control-plane/runtimes/process/procfs.js";
import { attach, dataDir, envdPid, isRoot, log, newId, ROOT, sleep, useProcessRuntime } from "../helpers/process-runtime.js";

useProcessRuntime(import.meta.url);

/** What the child control plane (CHILD_SCRIPT) reports. */
interface ChildReport {
  mode: string;
  userMapping: boolean;
  notes: string[];
  id?: string;
  out?: Record<string, string>;
  hostTmpHasFile?: boolean;
  counterStopped?: boolean;
  counterResumed?: boolean;
  afterKillAlive?: boolean;
}

/**
 * Runs a control plane in another process (as another user, or with another
 * node binary): it creates one sandbox, runs `commands` in it, pauses and
 * resumes it around a counter, kills it and reports as JSON.
 */
function runChild(opts: { node?: string; uid?: number; commands: string[] }): ChildReport {
  const work = mkdtempSync("/var/tmp/locale2b-prt-child-");
  try {
    chmodSync(work, 0o755);
    // Bare imports in the script resolve through this link to the project's node_modules.
    symlinkSync(join(ROOT, "node_modules"), join(work, "node_modules"));
    const data = join(work, "data");
    mkdirSync(data);
    if (opts.uid !== undefined) execFileSync("chown", [`${opts.uid}:${opts.uid}`, data]);
    const script = join(work, "child.mjs");
    writeFileSync(script, CHILD_SCRIPT);
    chmodSync(script, 0o644);
    const node = opts.node ?? process.execPath;
    const argv = [script, ROOT, data, JSON.stringify(opts.commands)];
    const [file, args] =
      opts.uid === undefined ? [node, argv] : ["setpriv", ["--reuid", String(opts.uid), "--regid", String(opts.uid), "--clear-groups", node, ...argv]];
    const r = spawnSync(file, args, { encoding: "utf8", timeout: 90_000, cwd: work });
    if (r.status !== 0) throw new Error(`child control plane failed (${r.status ?? r.signal}): ${r.stderr}\n${r.stdout}`);
    return JSON.parse(r.stdout.trim().split("\n").at(-1)!) as ChildReport;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

describe.skipIf(!isRoot)("process runtime in other set-ups (need root to arrange: skipped when not root)", () => {
  it("as an ordinary user (nobody): user namespaces, processes as `user`, SIGSTOP pause, and says what it lacks", () => {
    const r = runChild({ uid: 65534, commands: ["whoami", "echo ~", "hostname", "ls -A /home", "ps -e -o pid= | wc -l", "id -u"] });
    // eslint-disable-next-line no-console
    console.log(`process runtime check() as nobody (mode ${r.mode}):\n${r.notes.map((n) => `  - ${n}`).join("\n")}`);
    if (r.mode !== "userns") {
      expect(r.notes.join("\n")).toMatch(/WITHOUT isolation/);
      return;
    }
    const out = r.out!;
    expect(out.whoami).toBe(r.userMapping ? "user" : "root");
    expect(out["echo ~"]).toBe(r.userMapping ? "/home/user" : "/root");
    expect(out.hostname).toBe(r.id);
    expect(out["ls -A /home"]).toBe("user");
    expect(Number(out["ps -e -o pid= | wc -l"])).toBeLessThan(10);
    expect(r.hostTmpHasFile).toBe(false);
    expect(r.counterStopped).toBe(true);
    expect(r.counterResumed).toBe(true);
    expect(r.afterKillAlive).toBe(false);
    expect(r.notes.some((n) => /not running as root/.test(n))).toBe(true);
    expect(r.notes.some((n) => /cgroup/.test(n))).toBe(true);
  });
});

describe.skipIf(!isRoot)("process runtime with a cgroup v2 parent (needs root: skipped when not root)", () => {
  const unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"].find((d) => existsSync(join(d, "cgroup.subtree_control")));
  const parent = unified && join(unified, `locale2b-prt-${randomBytes(4).toString("hex")}`);

  afterAll(() => {
    if (parent && existsSync(parent)) rmdirSync(parent);
  });

  it.skipIf(!parent)("freezes, kills and removes v2 groups (LOCALE2B_CGROUP_PARENT / cgroupParent)", async () => {
    const rt = new ProcessRuntime({ cgroupParent: parent });
    const notes = await rt.check();
    const caps = await rt.capabilities();
    expect(caps.cgroups?.kind).toBe("v2");
    // On a hybrid host the v2 tree has no memory/cpu/pids controllers: check() says so.
    for (const c of ["memory", "cpu", "pids"]) {
      const has = (caps.cgroups as unknown as { controllers: string[] }).controllers.includes(c);
      expect(notes.some((n) => n.includes(`cgroup ${c} controller`))).toBe(!has);
    }
    const id = newId();
    const dir = join(dataDir, "sandboxes", id);
    mkdirSync(dir, { recursive: true });
    const inst = await rt.create({ sandboxId: id, templateId: "base", cpuCount: 1, memoryMB: 256, diskSizeMB: 1024, dir, allowInternetAccess: true, log });
    const s = await attach(id, dir, inst);
    const rec = inst.cgroup!.record;
    expect(rec).toEqual({ kind: "v2", dir: join(parent!, id) });
    expect(inst.cgroup!.pids()).toContain(envdPid(s));
    expect(await s.sh("whoami")).toBe("user");
    await s.sh("nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i >> /tmp/counter; sleep 0.02; done' >/dev/null 2>&1 &");
    const file = `/proc/${inst.initPid}/root/tmp/counter`;
    const counter = () => (existsSync(file) ? readFileSync(file, "utf8").split("\n").length - 1 : 0);
    await expect.poll(counter).toBeGreaterThan(0);
    await inst.pause();
    expect(readFileSync(join(parent!, id, "cgroup.events"), "utf8")).toMatch(/frozen 1/);
    const c1 = counter();
    await sleep(300);
    expect(counter()).toBe(c1);
    await inst.resume();
    await expect.poll(counter).toBeGreaterThan(c1);
    expect((await inst.stats()).cpuUsedPct).toBeGreaterThan(0);
    const pids = inst.pids();
    await inst.kill();
    for (const p of pids) expect(isRunning(p)).toBe(false);
    expect(existsSync(join(parent!, id))).toBe(false);
  });
});

// host-envd: envd on the host itself, as root (test/helpers/accounts.ts).
describe.skipIf(!isRoot)("process runtime without namespaces (needs root: skipped when not root)", { tags: ["host-envd"] }, () => {
  it("runs envd unisolated when namespaces are unavailable, and still kills it all", async () => {
    const rt = new ProcessRuntime({ forceMode: "none" });
    const id = newId();
    const dir = join(dataDir, "sandboxes", id);
    mkdirSync(dir, { recursive: true });
    const inst = await rt.create({ sandboxId: id, templateId: "base", cpuCount: 1, memoryMB: 256, diskSizeMB: 1024, dir, allowInternetAccess: true, log });
    // On the host, as the control plane's own user (root here), whether or not the host has an account named `user`.
    expect(inst.defaultUser).toBe("root");
    const s = await attach(id, dir, inst);
    expect(await s.sh("whoami")).toBe("root");
    expect(await s.sh("pwd")).toBe("/root");
    expect(await s.sh("hostname")).not.toBe(id);
    const child = Number(await s.sh("sleep 300 >/dev/null 2>&1 & echo $!"));
    await inst.kill();
    expect(isRunning(inst.pid)).toBe(false);
    expect(isRunning(child)).toBe(false);
  });
});

const CHILD_SCRIPT = `
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
const [root, data, commandsJson] = process.argv.slice(2);
const commands = JSON.parse(commandsJson);
const { ProcessRuntime } = await import(root + "/dist/control-plane/runtimes/process/process-runtime.js");
const { LocalEndpoint } = await import(root + "/dist/control-plane/transport/local-endpoint.js");
const { EnvdClient } = await import(root + "/dist/control-plane/transport/envd-client.js");
const { Process } = await import(root + "/dist/gen/ts/process/process_pb.js");
const quiet = { debug() {}, info() {}, warn() {}, error() {}, child() { return quiet; } };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rt = new ProcessRuntime();
const notes = await rt.check();
const caps = await rt.capabilities();
const report = { mode: caps.mode, userMapping: caps.userMapping, notes };
if (caps.mode !== "none") {
  const id = "child" + Date.now().toString(36);
  const dir = data + "/sandboxes/" + id;
  mkdirSync(dir, { recursive: true });
  const inst = await rt.create({ sandboxId: id, templateId: "base", cpuCount: 1, memoryMB: 256, diskSizeMB: 1024, dir, allowInternetAccess: true, log: quiet });
  const endpoint = new LocalEndpoint(id, inst.socketPath);
  const envd = new EnvdClient();
  try {
    await envd.waitReady(endpoint, 30000, () => inst.alive());
    const init = await envd.request(endpoint, { method: "POST", path: "/init", body: { defaultUser: inst.defaultUser, defaultWorkdir: inst.defaultWorkdir } });
    if (init.status !== 204) throw new Error("init answered " + init.status);
    const client = createClient(Process, createConnectTransport({ baseUrl: "http://envd", httpVersion: "1.1", nodeOptions: { agent: endpoint.agent() } }));
    const sh = async (cmd) => {
      let stdout = "";
      for await (const res of client.start({ process: { cmd: "/bin/sh", args: ["-c", cmd] } })) {
        const e = res.event?.event;
        if (e?.case === "data" && e.value.output.case === "stdout") stdout += new TextDecoder().decode(e.value.output.value);
      }
      return stdout.trim();
    };
    report.id = id;
    report.out = {};
    for (const c of commands) report.out[c] = await sh(c);
    await sh("echo x > /tmp/" + id);
    report.hostTmpHasFile = existsSync("/tmp/" + id);
    await sh("nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i >> /tmp/counter; sleep 0.02; done' >/dev/null 2>&1 &");
    const counter = () => { try { return readFileSync(dir + "/tmp/counter", "utf8").split("\\n").length - 1; } catch { return 0; } };
    for (let i = 0; i < 100 && counter() === 0; i++) await sleep(20);
    await inst.pause();
    const c1 = counter();
    await sleep(400);
    report.counterStopped = counter() === c1;
    await inst.resume();
    for (let i = 0; i < 100 && counter() === c1; i++) await sleep(20);
    report.counterResumed = counter() > c1;
  } finally {
    await inst.kill();
    endpoint.close();
  }
  report.afterKillAlive = await inst.alive();
}
console.log(JSON.stringify(report));
`;
