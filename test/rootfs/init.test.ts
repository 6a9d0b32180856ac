// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The guest init (rootfs/init/*.c): built with ensureInitBinary, run as an
// ordinary process in process mode (hybrid-vsock Unix socket in front, this
// repo's envd behind), and driven through the same dialer the control plane
// uses. VM mode can only be checked here for its flags, its AF_VSOCK
// listener's bind, and (as root) as PID 1 of a pid namespace.
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureInitBinary } from "../../control-plane/images/guest-init.js";
import { GUEST } from "../../control-plane/images/layout.js";
import { cliEntry } from "../../control-plane/runtimes/paths.js";
import { dialHybridVsock, FORWARD_PORT, HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { ENVD_PORT } from "../../envd/version.js";
import { Process } from "../../gen/ts/process/process_pb.js";
import {
  childrenOf,
  cpuTicks,
  fdCount,
  hasGcc,
  memoryKiB,
  procInfo,
  startInit,
  startInitWithEnvd,
  which,
  request,
  rawExchange,
  readAll,
  stopInit,
  type RunningInit,
} from "../helpers/guest-init.js";
import { waitFor } from "../helpers/wait.js";
import { run } from "../helpers/process.js";
import { SELF } from "../helpers/accounts.js";

const MiB = 1024 * 1024;
if (!hasGcc) console.warn("test/rootfs/init.test.ts: skipping the guest init tests: gcc is missing (install gcc and libc6-dev: scripts/setup-host)");

let work: string;
let binary: string;

beforeAll(async () => {
  if (!hasGcc) return;
  work = mkdtempSync(join(tmpdir(), "l2b-init-"));
  binary = await ensureInitBinary(join(work, "images"));
});
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe.skipIf(!hasGcc)("ensureInitBinary", () => {
  it("builds one static binary per source version and reuses it", async () => {
    expect(binary).toMatch(/\/init\/[0-9a-f]{16}\/locale2b-init$/);
    expect(statSync(binary).mode & 0o111).toBeTruthy();
    expect(readFileSync(binary).subarray(0, 4).toString("latin1")).toBe("\x7fELF");
    const again: string[] = [];
    expect(await ensureInitBinary(join(work, "images"), (l) => again.push(l))).toBe(binary);
    expect(again.join("\n")).not.toMatch(/built the guest init/); // reused, not rebuilt
    const lines: string[] = [];
    const other = await ensureInitBinary(join(work, "images2"), (l) => lines.push(l));
    expect(other.split("/").slice(-2)).toEqual(binary.split("/").slice(-2));
    expect(lines.join("\n")).toMatch(/built the guest init/);
  });

  it("says what to install when the compiler or the static libc is missing", async () => {
    const cc = process.env.CC;
    const noLibc = join(work, "cc-without-libc");
    writeFileSync(noLibc, `#!/bin/sh\nexec gcc --sysroot=${join(work, "empty-sysroot")} "$@"\n`, { mode: 0o755 });
    try {
      process.env.CC = join(work, "no-such-cc");
      await expect(ensureInitBinary(join(work, "images-nocc"))).rejects.toThrow(/not found: install gcc and libc6-dev \(scripts\/setup-host\)/);
      process.env.CC = noLibc;
      await expect(ensureInitBinary(join(work, "images-nolibc"))).rejects.toThrow(/static libc or headers missing: install gcc and libc6-dev/);
    } finally {
      if (cc === undefined) delete process.env.CC;
      else process.env.CC = cc;
    }
    // Nothing half-built is left behind.
    expect(existsSync(join(work, "images-nolibc", "init")) && readdirSync(join(work, "images-nolibc", "init"))).toEqual([]);
  });
});

describe.skipIf(!hasGcc)("guest init, process mode, with envd behind it", () => {
  let dir: string;
  let init: RunningInit;
  let host: string;
  let agent: HybridVsockAgent;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "l2b-init-"));
    host = join(dir, "host.sock");
    init = startInitWithEnvd(binary, dir, ["--envd-log", "warn"]);
    await init.waitForLog(/listening on unix:.*host\.sock/);
    agent = new HybridVsockAgent(host, ENVD_PORT);
  });
  afterAll(async () => {
    agent?.destroy();
    await stopInit(init);
    rmSync(dir, { recursive: true, force: true });
  });

  it("answers GET /health through the bridge (waiting for envd to come up)", async () => {
    const res = await request(agent, "GET", "/health");
    expect(res.status).toBe(204);
    expect(init.log()).toMatch(/locale2b-init: envd started \(pid \d+\)/);
    expect(childrenOf(init.pid).map((p) => p.comm)).toContain("node");
  });

  it("runs a process through the Process service", async () => {
    const client = createClient(Process, createConnectTransport({ baseUrl: "http://envd", httpVersion: "1.1", nodeOptions: { agent } }));
    const r = await run(client, "echo hello from $(basename $0); echo oops >&2; exit 3");
    expect(r.stdout).toBe("hello from sh\n");
    expect(r.stderr).toBe("oops\n");
    expect(r.end?.exitCode).toBe(3);
  });

  it("moves 64 MiB each way intact, with bounded memory and no busy loop while a reader stalls", async () => {
    const data = randomBytes(64 * MiB);
    const sum = createHash("sha256").update(data).digest("hex");
    const path = join(dir, "big.bin");
    const up = await request(agent, "POST", `/files?${new URLSearchParams({ path })}`, data);
    expect(up.status).toBe(200);
    expect(createHash("sha256").update(readFileSync(path)).digest("hex")).toBe(sum);

    // Download, stalling the reader for 1.5 s: envd must be held back by the bridge, not buffered in it.
    const hash = createHash("sha256");
    let stalled: { rss: number; ticks: number } | undefined;
    const ticksBefore = cpuTicks(init.pid);
    const down = await new Promise<number>((resolve, reject) => {
      const req = http.request({ host: "envd", path: `/files?${new URLSearchParams({ path })}`, agent }, (res) => {
        let first = true;
        res.on("data", (c: Buffer) => {
          hash.update(c);
          if (!first) return;
          first = false;
          res.pause();
          setTimeout(() => {
            stalled = { rss: memoryKiB(init.pid).rss, ticks: cpuTicks(init.pid) - ticksBefore };
            res.resume();
          }, 1500);
        });
        res.on("end", () => resolve(res.statusCode!));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end();
    });
    expect(down).toBe(200);
    expect(hash.digest("hex")).toBe(sum);
    // Two 256 KiB buffers per connection, not 64 MiB; and the stall cost (almost) no CPU.
    expect(stalled!.rss).toBeLessThan(8 * 1024);
    expect(memoryKiB(init.pid).hwm).toBeLessThan(16 * 1024);
    expect(stalled!.ticks).toBeLessThan(50); // < 0.5 s of CPU at 100 Hz over a 1.5 s stall
    rmSync(path);
  });

  it("serves 200 concurrent connections", async () => {
    const fdsBefore = fdCount(init.pid);
    const sockets = await Promise.all(Array.from({ length: 200 }, () => dialHybridVsock(host, ENVD_PORT)));
    // Each accepted connection holds its own socket to envd: two descriptors per connection.
    expect(fdCount(init.pid)).toBeGreaterThanOrEqual(fdsBefore + 400);
    const replies = await Promise.all(
      sockets.map((s) => {
        const all = readAll(s);
        s.write("GET /health HTTP/1.1\r\nHost: envd\r\nConnection: close\r\n\r\n");
        return all;
      }),
    );
    for (const r of replies) expect(r).toMatch(/^HTTP\/1\.1 204 /);
    await waitFor(() => fdCount(init.pid) <= fdsBefore + 4, "the init to close the finished connections", { timeoutMs: 10_000 });
  });

  it("passes a half-close on: a request followed by EOF still gets its whole answer", async () => {
    const s = await dialHybridVsock(host, ENVD_PORT);
    const all = readAll(s);
    s.end("GET /health HTTP/1.1\r\nHost: envd\r\n\r\n");
    expect(await all).toMatch(/^HTTP\/1\.1 204 /);
  });

  it("closes the connection on a bad handshake, without an answer", async () => {
    // 49982 (port forwarding) only with --forward-ports.
    for (const bad of ["HELLO\n", "CONNECT 1234\n", "CONNECT 49982\n", "CONNECT 49982\nTCP 80\n", "CONNECT\n", "connect 49983\n", `CONNECT ${"9".repeat(70)}`]) {
      const r = await rawExchange(host, bad);
      expect(r.data, bad).toBe("");
    }
    await expect(dialHybridVsock(host, 1234)).rejects.toThrow(/closed the vsock connection/);
    await expect(dialHybridVsock(host, FORWARD_PORT)).rejects.toThrow(/closed the vsock connection/);
    // A request sent in the same write as the handshake line still gets through.
    const r = await rawExchange(host, "CONNECT 49983\nGET /health HTTP/1.1\r\nHost: envd\r\nConnection: close\r\n\r\n");
    expect(r.data).toMatch(/^OK 49983\nHTTP\/1\.1 204 /);
  });

  it("restarts envd when it dies, and holds new connections until it is back", async () => {
    const pids = () => [...init.log().matchAll(/envd started \(pid (\d+)\)/g)].map((m) => Number(m[1]));
    const before = pids().at(-1)!;
    process.kill(before, "SIGKILL");
    await init.waitForLog(/envd was killed by SIGKILL; restarting it in \d+ ms/);
    // envd is dead and reaped; this dial reaches the init at once and waits for the new envd.
    const fresh = new HybridVsockAgent(host, ENVD_PORT);
    try {
      expect((await request(fresh, "GET", "/health")).status).toBe(204);
    } finally {
      fresh.destroy();
    }
    const after = pids().at(-1)!;
    expect(after).not.toBe(before);
    expect(procInfo(after)?.ppid).toBe(init.pid);
  });

  it("adopts and reaps orphaned grandchildren", async () => {
    agent.destroy();
    agent = new HybridVsockAgent(host, ENVD_PORT); // the old pool's sockets went to the killed envd
    const client = createClient(Process, createConnectTransport({ baseUrl: "http://envd", httpVersion: "1.1", nodeOptions: { agent } }));
    const orphan = "(setsid sleep 1 </dev/null >/dev/null 2>&1 &)";
    const r = await run(client, `${orphan}; ${orphan}; ${orphan}; echo spawned`);
    expect(r.stdout).toBe("spawned\n");
    // Their parents are gone: the init (a subreaper here) is their parent now...
    await waitFor(() => childrenOf(init.pid).filter((p) => p.comm === "sleep").length === 3, "3 orphaned sleeps under the init", { timeoutMs: 2000 });
    // ...and once they exit it reaps them: no zombie is left behind.
    await waitFor(() => !childrenOf(init.pid).some((p) => p.comm === "sleep"), "the sleeps to be reaped", { timeoutMs: 5000 });
    expect(childrenOf(init.pid).filter((p) => p.state === "Z")).toEqual([]);
  });

  it("on SIGTERM stops envd and everything else (SIGKILL for the stubborn), then exits 0", async () => {
    const client = createClient(Process, createConnectTransport({ baseUrl: "http://envd", httpVersion: "1.1", nodeOptions: { agent } }));
    await run(client, `(setsid sh -c "trap '' TERM; exec sleep 1000" </dev/null >/dev/null 2>&1 &); echo ok`);
    await waitFor(() => childrenOf(init.pid).some((p) => p.comm === "sleep"), "the stubborn sleep under the init", { timeoutMs: 2000 });
    const stubborn = childrenOf(init.pid).find((p) => p.comm === "sleep")!.pid;
    const envd = childrenOf(init.pid).find((p) => p.comm === "node")!.pid;
    agent.destroy();
    const t0 = Date.now();
    init.child.kill("SIGTERM");
    expect(await init.exited).toEqual({ code: 0, signal: null });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1900); // the grace period before SIGKILL
    expect(init.log()).toMatch(/shutting down \(SIGTERM\)/);
    expect(init.log()).toMatch(/envd exited with status 0/); // its own SIGTERM handler ran
    expect(init.log()).toMatch(/still running after 2000 ms: killing them/);
    expect(procInfo(stubborn)).toBeUndefined();
    expect(procInfo(envd)).toBeUndefined();
    expect(existsSync(host)).toBe(false);
  });
});

describe.skipIf(!hasGcc)("guest init under a small open-files limit", () => {
  it("holds connections beyond what its descriptors allow in the backlog instead of failing them", async () => {
    const dir = mkdtempSync(join(tmpdir(), "l2b-init-"));
    const host = join(dir, "host.sock");
    const envdSocket = join(dir, "envd.sock");
    const args = ["--no-mounts", "--hybrid-listen", host, "--envd-socket", envdSocket, "--envd-cmd", process.execPath];
    for (const a of [cliEntry(), "envd", "--listen", `unix://${envdSocket}`, "--user", SELF.name]) args.push("--envd-arg", a);
    // 200 descriptors: room for ~84 connections at a time; 400 arrive at once.
    const init = startInit("/bin/sh", ["-c", 'ulimit -n 200 && exec "$@"', "sh", binary, ...args]);
    try {
      await init.waitForLog(/listening on unix:/);
      const one = async () => {
        const s = await dialHybridVsock(host, ENVD_PORT, 30_000);
        const all = readAll(s);
        s.write("GET /health HTTP/1.1\r\nHost: envd\r\nConnection: close\r\n\r\n");
        return all;
      };
      const replies = await Promise.all(Array.from({ length: 400 }, one));
      expect(replies.filter((r) => /^HTTP\/1\.1 204 /.test(r)).length).toBe(400);
      expect(init.log()).toMatch(/open files limit reached: new connections wait until others close/);
      expect(init.log()).not.toMatch(/did not accept/);
      init.child.kill("SIGTERM");
      expect(await init.exited).toEqual({ code: 0, signal: null });
    } finally {
      await stopInit(init);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!hasGcc)("guest init, flags and VM mode", () => {
  it("parses VM mode's kernel parameters and prints the resolved configuration", () => {
    const cmdline = join(work, "cmdline");
    writeFileSync(cmdline, "console=ttyS0 reboot=k l2b.hostname=sbx-42 l2b.epoch=1700000000 l2b.envd_log=debug quiet\n");
    const r = spawnText(binary, ["--print-config", "--cmdline-file", cmdline]);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split("\n");
    expect(lines).toEqual([
      "mode=vm",
      "listen=vsock:49983",
      "mounts=vm",
      "hostname=sbx-42",
      "epoch=1700000000",
      "envd_log=debug",
      "envd_socket=/run/locale2b/envd.sock",
      "forward_ports=on",
      ...[GUEST.node, ...GUEST.nodeFlags, GUEST.envd].map((a) => `envd_arg=${a}`),
      "envd_arg=--listen",
      "envd_arg=unix:///run/locale2b/envd.sock",
      "envd_arg=--user",
      "envd_arg=user",
      "envd_arg=--workdir",
      "envd_arg=/home/user",
      "envd_env=LOCALE2B_LOG_LEVEL=debug",
      "envd_env=LOCALE2B_SPAWN_HELPER=/proc/1/exe",
      "envd_env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "envd_env=HOME=/root",
      "envd_env=TERM=linux",
      "envd_env=LANG=C.UTF-8",
    ]);
    // Flags win over kernel parameters; --envd-arg adds to the default command.
    const f = spawnText(binary, ["--print-config", "--cmdline-file", cmdline, "--hostname", "h2", "--envd-log", "info", "--envd-arg", "--access-token=x"]);
    expect(f.stdout).toMatch(/^hostname=h2$/m);
    expect(f.stdout).toMatch(/^envd_log=info$/m);
    expect(f.stdout).toMatch(/^envd_arg=--workdir\nenvd_arg=\/home\/user\nenvd_arg=--access-token=x$/m);
    // l2b.forward_ports=0 turns the forwarder (vsock port 49982) off.
    writeFileSync(cmdline, "console=ttyS0 l2b.forward_ports=0\n");
    expect(spawnText(binary, ["--print-config", "--cmdline-file", cmdline]).stdout).toMatch(/^forward_ports=off$/m);
  });

  it("prints process mode's configuration", () => {
    const r = spawnText(binary, ["--print-config", "--hybrid-listen", "/x/host.sock", "--no-mounts", "--envd-socket", "/x/e.sock", "--envd-cmd", "/bin/e", "--envd-arg", "a b"]);
    expect(r.stdout).toBe(
      "mode=hybrid\nlisten=unix:/x/host.sock\nmounts=none\nhostname=\nepoch=0\nenvd_log=\nenvd_socket=/x/e.sock\nforward_ports=off\nenvd_arg=/bin/e\nenvd_arg=a b\n",
    );
    expect(spawnText(binary, ["--print-config", "--hybrid-listen", "/x/host.sock", "--forward-ports"]).stdout).toMatch(/^forward_ports=on$/m);
  });

  it("refuses VM mode when not PID 1, and unknown or malformed flags", () => {
    const vm = spawnText(binary, []);
    expect(vm.code).toBe(2);
    expect(vm.stderr).toMatch(/not PID 1: .*--hybrid-listen/);
    expect(spawnText(binary, ["--hybrid-listen", "/x", "--bogus"]).stderr).toMatch(/unknown argument '--bogus'/);
    expect(spawnText(binary, ["--hybrid-listen", "rel.sock"]).code).toBe(2);
    expect(spawnText(binary, ["--vsock-listen", "nope"]).code).toBe(2);
    expect(spawnText(binary, ["--hybrid-listen"]).stderr).toMatch(/--hybrid-listen needs a value/);
    expect(spawnText(binary, ["--help"]).stdout).toMatch(/--hybrid-listen PATH/);
  });

  it("binds the AF_VSOCK listener VM mode uses (no guest here to connect from)", async () => {
    const port = 40000 + Math.floor(Math.random() * 20000);
    const args = ["--no-mounts", "--vsock-listen", String(port), "--envd-cmd", "/bin/sleep", "--envd-arg", "1000"];
    const first = startInit(binary, args);
    const m = await first.waitForLog(/listening on vsock port \d+|cannot listen on vsock port \d+: .*/);
    if (/Address family not supported/.test(m[0])) {
      console.warn(`skipping the vsock listener check: ${m[0]}`);
      return;
    }
    expect(m[0]).toBe(`listening on vsock port ${port}`);
    // The port is really bound: a second listener on it fails.
    const second = startInit(binary, args);
    expect((await second.exited).code).toBe(1);
    expect(second.log()).toMatch(new RegExp(`cannot listen on vsock port ${port}: Address already in use`));
    first.child.kill("SIGTERM");
    expect(await first.exited).toEqual({ code: 0, signal: null });
  });

  // The host may move the socket away the moment it appears (gVisor's control plane renames it out of
  // the directory the sandbox shares); a bind still settling in gVisor then failed with ENOENT and
  // PID 1 exited. So it appears only once it listens: bound and listening as <path>.tmp, then renamed.
  const strace = which("strace");
  it.skipIf(!strace)(`the hybrid socket appears at its path only once it listens${strace ? "" : " [skipped: no strace]"}`, async () => {
    const dir = mkdtempSync(join(tmpdir(), "l2b-init-sock-"));
    try {
      const sock = join(dir, "host.sock");
      writeFileSync(`${sock}.tmp`, ""); // a leftover that is not a socket: never removed, so the bind fails
      const trace = join(dir, "trace");
      const args = ["--no-mounts", "--hybrid-listen", sock, "--envd-cmd", "/bin/sleep", "--envd-arg", "1000"];
      const refused = startInit(strace!, ["-f", "-qq", "-o", trace, "-e", "trace=bind,listen,rename", binary, ...args]);
      expect((await refused.exited).code).toBe(1);
      expect(refused.log()).toMatch(/cannot listen on .*host\.sock: Address already in use/);
      expect(existsSync(sock)).toBe(false);

      rmSync(`${sock}.tmp`);
      const init = startInit(strace!, ["-f", "-qq", "-o", trace, "-e", "trace=bind,listen,rename", binary, ...args]);
      await init.waitForLog(/listening on unix:.*host\.sock/);
      const lines = readFileSync(trace, "utf8").split("\n").filter(Boolean);
      expect(lines.map((l) => /(bind|listen|rename)\(/.exec(l)?.[1])).toEqual(["bind", "listen", "rename"]);
      expect(lines[0]).toContain(`sun_path="${sock}.tmp"`);
      expect(lines[2]).toContain(`rename("${sock}.tmp", "${sock}") = 0`);
      expect(statSync(sock).isSocket()).toBe(true);
      expect(existsSync(`${sock}.tmp`)).toBe(false);
      process.kill(Number(lines[0]!.split(" ")[0]), "SIGTERM"); // the init (strace's first line names it), not strace
      expect((await init.exited).code).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  const unshare = which("unshare");
  const asRoot = process.getuid?.() === 0;
  it.skipIf(!asRoot || !unshare)("runs VM mode as PID 1 of a pid namespace: set-up, envd, SIGTERM, power-off", async () => {
    const dir = mkdtempSync(join(tmpdir(), "l2b-init-vm-"));
    try {
      const cmdline = join(dir, "cmdline");
      // An epoch in the past (the clock only ever moves forward; here it is the host's clock).
      writeFileSync(cmdline, "console=ttyS0 l2b.hostname=vm-test l2b.epoch=1000000000 l2b.envd_log=trace single\n");
      const script = [
        `hostname > ${dir}/hostname`,
        `printf %s "$LOCALE2B_LOG_LEVEL:$HOME:$PATH" > ${dir}/env`,
        `(ip -o link show lo 2>/dev/null || echo no-ip) > ${dir}/lo`,
        `echo $$ > ${dir}/ready`,
        "exec sleep 1000",
      ].join("; ");
      const init = startInit(unshare!, [
        "--pid", "--fork", "--mount", "--uts", "--ipc", "--net", "--mount-proc", "--propagation", "private", "--kill-child", "--",
        binary, "--cmdline-file", cmdline, "--envd-socket", join(dir, "run", "envd.sock"),
        "--envd-cmd", "/bin/sh", "--envd-arg", "-c", "--envd-arg", script, "single",
      ]); // prettier-ignore
      try {
        await waitFor(() => existsSync(join(dir, "ready")), "the envd stand-in to start", { timeoutMs: 10_000 });
        expect(readFileSync(join(dir, "hostname"), "utf8").trim()).toBe("vm-test");
        expect(readFileSync(join(dir, "env"), "utf8")).toBe("trace:/root:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        const lo = readFileSync(join(dir, "lo"), "utf8");
        if (!lo.startsWith("no-ip")) expect(lo).toMatch(/<[^>]*\bUP\b/);
        expect(init.log()).toMatch(/ignoring argument 'single'/); // the kernel hands unknown boot words to init
        expect(init.log()).toMatch(/listening on vsock port 49983|cannot listen on vsock port 49983/);
        expect(init.log()).toMatch(/listening on vsock port 49982 \(port forwarding\)|cannot listen on vsock port 49982/);
        const pid1 = childrenOf(init.pid)[0]!.pid; // the init, as seen from here
        process.kill(pid1, "SIGTERM");
        await init.exited;
        expect(init.log()).toMatch(/shutting down \(SIGTERM\)/);
        expect(init.log()).toMatch(/powering off/);
      } finally {
        if (init.child.exitCode === null && init.child.signalCode === null) init.child.kill("SIGKILL");
        await init.exited;
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

function spawnText(file: string, args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(file, args, { encoding: "utf8" });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
