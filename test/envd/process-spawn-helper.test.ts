// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// envd's process suites again as envd runs in every sandbox: every process
// started by the init's spawn helper (`locale2b-init --spawn-helper`,
// rootfs/init/spawn.c; the init tells envd where it is, LOCALE2B_SPAWN_HELPER),
// and envd's own global Headers (envd/polyfill/headers.ts) instead of undici's.
// Plus what only the helper has: its answers, its death, its absence.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureInitBinary } from "../../control-plane/images/guest-init.js";
import { imagesDir } from "../../control-plane/images/layout.js";
import { installEnvdHeaders } from "../../envd/polyfill/headers.js";
import { readBufferStats } from "../../envd/process/handler/pooled-pipe.js";
import { resetSpawnHelper, spawnHelper, spawnHelperUnusable } from "../../envd/process/handler/spawn-helper.js";
import { basicAuth, clients, startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { readUntil, run } from "../helpers/process.js";
import { freePort, startHttpChild } from "../../bench/lib/envd.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
installEnvdHeaders();
process.env.LOCALE2B_SPAWN_HELPER = await ensureInitBinary(imagesDir());
await import("./process.test.js");
await import("./process-streams.test.js");

describe("the spawn helper itself", () => {
  let envd: TestEnvd;
  beforeAll(async () => {
    envd = await startTestEnvd();
  });
  afterAll(async () => {
    await envd?.close();
  });

  it("starts envd's processes: they are its children, not envd's, and it reaps them", async () => {
    const { process: proc } = clients(envd.url, "connect-binary");
    const r = await run(proc, "cat /proc/$$/stat | cut -d' ' -f4; echo $PPID");
    const [ppid] = r.stdout.trim().split("\n");
    const helper = await spawnHelper();
    expect(helper).toBeDefined();
    expect(Number(ppid)).toBe(helper!.proc.pid);
    expect(Number(ppid)).not.toBe(process.pid);
    expect(readFileSync(`/proc/${helper!.proc.pid}/cmdline`, "utf8").split("\0")).toContain("--spawn-helper");
    // Its own fds: stdin, stdout, stderr, /dev/null, the signalfd, the probe pipe; soon no pipe of a started process.
    const fds = () => execFileSync("ls", [`/proc/${helper!.proc.pid}/fd`], { encoding: "utf8" }).trim().split("\n").length;
    await expect.poll(fds).toBeLessThanOrEqual(7);
  });

  it.skipIf(process.getuid?.() !== 0)("a process as another user can neither reach the helper's pipes nor signal it; as root it is in the same place as envd", async () => {
    const { process: proc } = clients(envd.url, "connect-binary");
    const helper = (await spawnHelper())!;
    const pid = helper.proc.pid!;
    // Another process's pipe, held open by the helper while it waits: as nobody, /proc refuses its fds and its signals.
    const script = `ls /proc/${pid}/fd; cat /proc/${pid}/fd/0 </dev/null; kill -9 ${pid}; echo end`;
    const r = await run(proc, script, { process: { cmd: "/bin/sh", args: ["-c", script], cwd: "/" } }, basicAuth("nobody"));
    expect(r.stdout).toBe("end\n");
    expect(r.stderr).toMatch(/Permission denied/);
    expect(r.stderr).toMatch(/Operation not permitted/);
    expect(await spawnHelper()).toBe(helper); // still the same helper
    // Its processes, as any user, are the OOM killer's choice before envd (and before the helper).
    const oom = await run(proc, "cat /proc/self/oom_score_adj", { process: { cmd: "/bin/sh", args: ["-c", "cat /proc/self/oom_score_adj"], cwd: "/" } }, basicAuth("nobody"));
    expect(oom.stdout.trim()).toBe(Number(readFileSync("/proc/self/oom_score_adj", "utf8")) < 500 ? "500" : readFileSync("/proc/self/oom_score_adj", "utf8").trim());
    // As root (normal in a sandbox) it is no more than envd itself: same user, same namespaces and cgroup.
    const ns = (p: number | string) => ["mnt", "pid", "net", "user", "uts"].map((n) => execFileSync("readlink", [`/proc/${p}/ns/${n}`], { encoding: "utf8" }).trim());
    expect(ns(pid)).toEqual(ns(process.pid));
    expect(readFileSync(`/proc/${pid}/cgroup`, "utf8")).toBe(readFileSync(`/proc/${process.pid}/cgroup`, "utf8"));
    expect(readFileSync(`/proc/${pid}/status`, "utf8").match(/^(Uid|Gid|CapEff|CapBnd|NoNewPrivs|Seccomp):.*$/gm)).toEqual(
      readFileSync(`/proc/${process.pid}/status`, "utf8").match(/^(Uid|Gid|CapEff|CapBnd|NoNewPrivs|Seccomp):.*$/gm),
    );
  });

  // envd as root WITHOUT CAP_SYS_PTRACE (as in a sandbox's user namespace): /proc/<helper>/fd then
  // follows the helper's dumpable flag, which a child changing its uid clears for an instant.
  // It runs as a command, so it reads the host's /etc/passwd: `nobody` must be there.
  const hostNobody = /^nobody:/m.test(readFileSync("/etc/passwd", "utf8"));
  if (!hostNobody) console.warn("process-spawn-helper.test.ts: skipping the envd-without-CAP_SYS_PTRACE test: this host's /etc/passwd has no `nobody`");
  it.skipIf(process.getuid?.() !== 0 || !hostNobody)("many concurrent commands as another user, from an envd without CAP_SYS_PTRACE, all start", async () => {
    const port = await freePort();
    const child = await startHttpChild({
      name: "envd without CAP_SYS_PTRACE",
      command: "setpriv",
      args: ["--bounding-set", "-sys_ptrace", "--inh-caps", "-sys_ptrace", process.execPath, join(ROOT, "dist/control-plane/cli/main.js"), "envd", "--listen", `tcp://127.0.0.1:${port}`, "--user", "root"],
      port,
      env: { ...process.env, LOCALE2B_LOG_LEVEL: "warn" },
    });
    try {
      expect(readFileSync(`/proc/${child.pid}/status`, "utf8")).toMatch(/^CapEff:\s+0*[0-9a-f]*$/m);
      const eff = BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))![1]}`);
      expect(eff & (1n << 19n)).toBe(0n); // no CAP_SYS_PTRACE
      const { process: proc } = clients(child.url, "connect-binary");
      const results = await Promise.allSettled(
        Array.from({ length: 60 }, (_, i) => run(proc, `echo ${i}`, { process: { cmd: "/bin/sh", args: ["-c", `echo ${i}`], cwd: "/" } }, basicAuth("nobody"))),
      );
      const failed = results.flatMap((r, i) => (r.status === "rejected" ? [`${i}: ${String(r.reason)}`] : []));
      expect(failed).toEqual([]);
      results.forEach((r, i) => expect((r as PromiseFulfilledResult<{ stdout: string }>).value.stdout).toBe(`${i}\n`));
    } finally {
      await child.stop();
    }
  });

  it("output is read into pooled buffers: every byte arrives in order, two clients at once, and every buffer goes back", async () => {
    const { process: proc } = clients(envd.url, "connect-binary");
    const { process: json } = clients(envd.url, "connect-json");
    // 1..400000 on stdout (2.7 MB, big reads) and a line per 50000 on stderr (small ones, copied).
    const script = "seq 1 400000; for i in 1 2 3 4 5 6 7 8; do echo err$i >&2; done";
    const want = Array.from({ length: 400000 }, (_, i) => `${i + 1}\n`).join("");
    const [a, b] = await Promise.all([run(proc, script), run(json, script)]);
    for (const r of [a, b]) {
      expect(r.stdout.length).toBe(want.length);
      expect(r.stdout === want).toBe(true);
      expect(r.stderr).toBe("err1\nerr2\nerr3\nerr4\nerr5\nerr6\nerr7\nerr8\n");
    }
    // A client that goes away mid-stream: what was queued for it goes back too.
    const abort = new AbortController();
    const it = proc.start({ process: { cmd: "/bin/sh", args: ["-c", "seq 1 100000000"], envs: {} } }, { signal: abort.signal })[Symbol.asyncIterator]();
    await readUntil(it, (text) => text.length > 1 << 20);
    // This client reads no more: chunks queue for it beyond the two buffers its pipes read into. How many
    // depends on the socket buffers the kernel gives both ends (5 and 7 were seen on busy hosts, 9+ when idle).
    await expect.poll(() => readBufferStats().lent, { timeout: 10_000 }).toBeGreaterThan(4);
    abort.abort();
    await it.next().catch(() => undefined);
    await run(proc, "pkill -f 'seq 1 100000000'; true");
    await expect.poll(() => readBufferStats().lent, { timeout: 10_000 }).toBe(0);
    expect(readBufferStats().kept).toBeGreaterThan(0);
  });

  it("a helper that dies: running processes are seen to end, the next command starts a new one", async () => {
    const { process: proc } = clients(envd.url, "connect-binary");
    const first = (await spawnHelper())!;
    const sleeping = run(proc, "sleep 0.5; echo done");
    await new Promise((r) => setTimeout(r, 100));
    first.proc.kill("SIGKILL");
    const r = await sleeping;
    expect(r.stdout).toBe("done\n"); // its output still arrives; its status is lost with the helper
    const again = await run(proc, "echo $PPID");
    const second = (await spawnHelper())!;
    expect(second.proc.pid).not.toBe(first.proc.pid);
    expect(Number(again.stdout.trim())).toBe(second.proc.pid);
    expect(again.end?.exitCode).toBe(0);
  });

  it("a helper that is not one: envd spawns with Node and says why", async () => {
    resetSpawnHelper();
    process.env.LOCALE2B_SPAWN_HELPER = "/bin/true";
    try {
      const { process: proc } = clients(envd.url, "connect-binary");
      const r = await run(proc, "echo $PPID");
      expect(Number(r.stdout.trim())).toBe(process.pid);
      expect(spawnHelperUnusable()).toMatch(/spawn helper \/bin\/true cannot be used/);
    } finally {
      process.env.LOCALE2B_SPAWN_HELPER = await ensureInitBinary(imagesDir());
      resetSpawnHelper();
    }
  });
});
