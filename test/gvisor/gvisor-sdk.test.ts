// One gVisor sandbox (runsc on the base template) behind a real control
// plane: the same E2B JS SDK suite as every runtime (commands, PTY, files,
// watch; test/helpers/sdk-envd-suite.ts), then what gvisor itself promises:
// envd over the hybrid-vsock socket in the sandbox's host directory, a
// user-space kernel, pause to disk (runsc checkpoint) and restore with its
// processes going on, user ports through the forwarder, stats from the host
// cgroup.
import { readdirSync } from "node:fs";
import http from "node:http";
import { Sandbox } from "e2b";
import { describe, expect, it } from "vitest";
import type { PersistedGvisorInstance } from "../../control-plane/runtimes/gvisor/instance.js";
import { isRunning } from "../../control-plane/runtimes/process/procfs.js";
import { dialHybridVsock } from "../../control-plane/transport/hybrid-vsock.js";
import { startTestControlPlane } from "../helpers/control-plane.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { defineEnvdSuite, suite } from "../helpers/sdk-envd-suite.js";
import { rejection, waitFor } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";
const TIMEOUT = 300_000;

describe.skipIf(missing !== undefined)(`gvisor runtime: one runsc sandbox${why}`, () => {
  defineEnvdSuite({
    start: () => startTestControlPlane({ runtime: gvisorRuntime(), imagesDir: testImagesDir() }),
    timeoutMs: TIMEOUT,
    sandboxTimeoutMs: 3_600_000,
  });

  const persisted = () => suite.cp!.manager.get(suite.sandbox!.sandboxId).runtimeData as unknown as PersistedGvisorInstance;

  describe("gvisor runtime: what only gVisor shows", { timeout: TIMEOUT }, () => {
    it("serves envd on <dir>/envd.sock (moved out of the shared host dir) with the hybrid-vsock handshake; other ports are refused", async () => {
      const inst = suite.cp!.manager.list().find((s) => s.id === suite.sandbox!.sandboxId)!;
      expect(inst.runtime).toBe("gvisor");
      const socketPath = `${suite.cp!.dataDir}/sandboxes/${inst.id}/envd.sock`;
      const s = await dialHybridVsock(socketPath, 49983);
      s.write("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      const reply = await new Promise<string>((resolve, reject) => {
        let text = "";
        s.on("data", (d: Buffer) => (text += d.toString()));
        s.on("end", () => resolve(text));
        s.on("error", reject);
      });
      expect(reply).toMatch(/^HTTP\/1\.1 204/);
      const err = await rejection(dialHybridVsock(socketPath, 1234, 20_000));
      expect(err.message).toMatch(/1234|closed|refused/);
    });

    it("runs under gVisor's kernel: dmesg says gVisor, only the template's files, init is locale2b-init", async () => {
      const sbx = suite.sandbox!;
      const r = await sbx.commands.run("dmesg 2>/dev/null | head -n 3; cat /proc/1/cmdline | tr '\\0' ' '; echo; hostname", { user: "root" });
      expect(r.stdout).toMatch(/gVisor/i);
      expect(r.stdout).toMatch(/locale2b-init --hybrid-listen/);
      expect(r.stdout).toContain(sbx.sandboxId);
      expect(persisted().pid).toBeGreaterThan(0);
      // Commands are started by the init's spawn helper (not a fork of envd), from the template's init binary.
      const parent = await sbx.commands.run("tr '\\0' ' ' < /proc/$PPID/cmdline", { user: "root" });
      expect(parent.stdout.trim()).toBe("/sbin/locale2b-init --spawn-helper");
    });

    it("a command's output pipes are 1 MiB (fewer wake-ups of envd through gVisor's kernel); a long output arrives whole and in order, and its end is seen", async () => {
      const sbx = suite.sandbox!;
      const size = await sbx.commands.run(`python3 -c 'import fcntl; print(fcntl.fcntl(1, 1032), fcntl.fcntl(2, 1032))'`); // F_GETPIPE_SZ
      expect(size.stdout.trim()).toBe("1048576 1048576");
      // 2.7 MB in 4 KiB writes: past the 1 MiB after which envd waits between reads that empty the pipe.
      const want = Array.from({ length: 400000 }, (_, i) => `${i + 1}\n`).join("");
      const chunks: string[] = [];
      const r = await sbx.commands.run("seq 1 400000; echo done >&2", { onStdout: (d) => void chunks.push(d), timeoutMs: 120_000 });
      expect(r.stdout.length).toBe(want.length);
      expect(r.stdout === want).toBe(true);
      expect(chunks.join("") === want).toBe(true);
      expect(r.stderr).toBe("done\n");
    });

    it("reports CPU and memory from the host cgroup (gVisor's /proc reads zeros inside)", async () => {
      const cp = suite.cp!;
      const res = await fetch(`${cp.url}/sandboxes/${suite.sandbox!.sandboxId}/metrics`, { headers: { "X-API-Key": cp.apiKey } });
      expect(res.status).toBe(200);
      const m = ((await res.json()) as { memUsed?: number; memTotal?: number; diskTotal?: number }[]).at(-1);
      expect(m?.memUsed).toBeGreaterThan(10 * 1024 * 1024);
      expect(m?.memTotal).toBeGreaterThan(0);
      expect(m?.diskTotal).toBeGreaterThan(0);
    });

    it("pauses to disk: the sentry and its memory are gone, open streams end; the resume restores it and its processes go on", async () => {
      const sandbox = suite.sandbox!;
      await sandbox.files.write("/home/user/kept.txt", "kept across pause");
      const ticker = await sandbox.commands.run("i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; echo $i; sleep 0.2; done", {
        background: true,
        timeoutMs: 0,
      });
      // `|| true`: the ticker may not have written its file yet.
      await waitFor(async () => Number((await sandbox.commands.run("cat /tmp/count 2>/dev/null || true")).stdout) > 3, "the ticker's first lines");
      const before = persisted();
      expect(isRunning(before.pid, before.startTime)).toBe(true);
      const stream = ticker.wait().then(
        () => "ended",
        (err: Error) => `failed: ${err.message}`,
      );

      expect(await sandbox.pause()).toBe(true);
      expect((await Sandbox.getInfo(sandbox.sandboxId)).state).toBe("paused");
      const paused = persisted();
      expect(paused.checkpointed).toBe(true);
      expect(isRunning(before.pid, before.startTime)).toBe(false); // the sentry, and the memory it held, are gone
      expect(readdirSync(`${suite.cp!.dataDir}/sandboxes/${sandbox.sandboxId}/checkpoint`)).toContain("pages.img");
      expect(await stream).toMatch(/^(ended|failed)/); // the output stream ended with the sentry (as on E2B)

      const again = await Sandbox.connect(sandbox.sandboxId);
      expect((await Sandbox.getInfo(sandbox.sandboxId)).state).toBe("running");
      const after = persisted();
      expect(after.checkpointed).toBeUndefined();
      expect(isRunning(after.pid, after.startTime)).toBe(true);
      // The same process, restored: its counter goes on from where it was.
      expect((await again.commands.list()).some((p) => p.pid === ticker.pid)).toBe(true);
      const n = Number((await again.commands.run("cat /tmp/count")).stdout);
      expect(n).toBeGreaterThan(3);
      await waitFor(async () => Number((await again.commands.run("cat /tmp/count")).stdout) > n, "the counter to go on after the restore");
      expect(await again.files.read("/home/user/kept.txt")).toBe("kept across pause");
      expect(await again.commands.kill(ticker.pid)).toBe(true);
    });

    it("serves a server the user runs on <port>-<id>.<domain> (getHost) through the forwarder; a closed port is refused", async () => {
      const sandbox = suite.sandbox!;
      const cp = suite.cp!;
      await sandbox.files.write("/home/user/www/hello.html", "hello from gVisor");
      const server = await sandbox.commands.run("python3 -m http.server 8080 --bind 127.0.0.1 --directory /home/user/www", { background: true, timeoutMs: 0 });
      const host = sandbox.getHost(8080);
      expect(host).toBe(`8080-${sandbox.sandboxId}.localhost:${new URL(cp.url).port}`);
      const get = (h: string, path: string) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          const req = http.get(`${cp.url}${path}`, { headers: { host: h } }, (res) => {
            let body = "";
            res.on("data", (d: Buffer) => (body += d.toString()));
            res.on("end", () => resolve({ status: res.statusCode!, body }));
          });
          req.on("error", reject);
        });
      let last = { status: 0, body: "" };
      await waitFor(async () => (last = await get(host, "/hello.html")).status === 200, () => `the user's server on port 8080 (last: ${last.status} ${last.body})`);
      expect(last.body).toBe("hello from gVisor");
      const closed = await get(`8081-${sandbox.sandboxId}.localhost`, "/");
      expect(closed.status).toBe(502);
      expect(JSON.parse(closed.body).message).toMatch(/port 8081 in the sandbox: .*refused/i);
      await sandbox.commands.kill(server.pid);
    });
  });
});
