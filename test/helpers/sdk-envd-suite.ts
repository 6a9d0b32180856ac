// The E2B JS SDK suite for one sandbox behind a real control plane
// (commands, stdin, PTY, files up to 64 MiB, watch, signed URLs), configured
// only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, all through the
// control plane's envd proxy. Defined once, run on every runtime:
// test/sdk/e2b-js-control-plane-envd.test.ts (process) and
// test/vm/qemu-sdk.test.ts (a QEMU microVM), and through a fleet's
// Kubernetes Service (test/k8s/fleet.test.ts).
import { createHash } from "node:crypto";
import http from "node:http";
import {
  CommandExitError,
  FileType,
  FilesystemEventType,
  Sandbox,
  type CommandHandle,
  type FilesystemEvent,
  type WatchHandle,
} from "e2b";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { TestControlPlane } from "./control-plane.js";
import { pseudoRandomStream, rejection, setEnv, terminal, waitFor } from "./sdk.js";

/** What the suite needs of the server it runs against. */
export interface SdkTarget {
  /** The server's URL (signed file URLs start with it). */
  url: string;
  /** E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY for it. */
  sdkEnv: Record<string, string>;
  close(): Promise<void>;
}

export interface EnvdSuiteOptions {
  /** Starts the control plane the suite runs against (its runtime is the thing under test), or finds another server. */
  start: () => Promise<SdkTarget>;
  /** Makes the suite's sandbox, with the SDK's environment set (default: Sandbox.create("base", { metadata, timeoutMs })). */
  create?: (opts: { metadata: Record<string, string>; timeoutMs?: number }) => Promise<Sandbox>;
  /** Per-test timeout (a VM under emulation is slow). */
  timeoutMs?: number;
  /** The sandbox's own timeout (E2B's default is 5 minutes: too short for a whole suite under emulation). */
  sandboxTimeoutMs?: number;
}

/** Sandbox and control plane of the suite defined last (for runtime-specific tests in the same file). */
export const suite: { sandbox?: Sandbox; cp?: TestControlPlane } = {};

const isControlPlane = (t: SdkTarget): t is TestControlPlane => "manager" in t;

export function defineEnvdSuite(o: EnvdSuiteOptions): void {
  let cp: SdkTarget;
  let restoreEnv = () => {};
  let sandbox: Sandbox;
  /** Background commands, PTYs and watches started by the current test, stopped after it. */
  let started: number[] = [];
  let watches: WatchHandle[] = [];
  let n = 0;

  beforeAll(async () => {
    cp = await o.start();
    restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    const opts = { metadata: { suite: "js-cp-envd" }, ...(o.sandboxTimeoutMs ? { timeoutMs: o.sandboxTimeoutMs } : {}) };
    sandbox = await (o.create ? o.create(opts) : Sandbox.create("base", opts));
    suite.sandbox = sandbox;
    suite.cp = isControlPlane(cp) ? cp : undefined;
  }, o.timeoutMs ?? 120_000); // a VM boot under emulation on a busy host can take minutes
  afterEach(async () => {
    for (const w of watches) await w.stop().catch(() => undefined);
    for (const pid of started) await sandbox.commands.kill(pid).catch(() => false);
    watches = [];
    started = [];
  });
  afterAll(async () => {
    if (sandbox) await sandbox.kill().catch(() => false);
    restoreEnv();
    await cp?.close();
  });

  function track<T extends CommandHandle>(h: T): T {
    started.push(h.pid);
    return h;
  }

  /** A new, empty directory under the sandbox user's home. */
  async function fresh(): Promise<string> {
    const dir = `/home/user/t-${n++}`;
    expect(await sandbox.files.makeDir(dir)).toBe(true);
    return dir;
  }

  const enc = (s: string) => new TextEncoder().encode(s);
  const isRunning = async (pid: number) => (await sandbox.commands.list()).some((p) => p.pid === pid);

  describe("commands", { timeout: o.timeoutMs }, () => {
    it("streams stdout and stderr to the callbacks while the command runs", async () => {
      const out: string[] = [];
      const err: string[] = [];
      const h = track(
        await sandbox.commands.run('echo first; echo warn >&2; read line; echo "got $line"; echo done >&2', {
          background: true,
          stdin: true,
          onStdout: (d) => void out.push(d),
          onStderr: (d) => void err.push(d),
        }),
      );
      await waitFor(() => out.join("") === "first\n" && err.join("") === "warn\n", "the first chunks");
      expect(h.exitCode).toBeUndefined();
      await h.sendStdin("go\n");
      const r = await h.wait();
      expect(r).toMatchObject({ exitCode: 0, stdout: "first\ngot go\n", stderr: "warn\ndone\n" });
      expect(out.join("")).toBe("first\ngot go\n");
      expect(err.join("")).toBe("warn\ndone\n");
    });

    it("foreground: result with exit code 0; CommandExitError for a non-zero exit", async () => {
      expect(await sandbox.commands.run("echo hello; echo oops >&2")).toMatchObject({ exitCode: 0, stdout: "hello\n", stderr: "oops\n" });
      const err = await rejection(sandbox.commands.run("echo partial; echo broken >&2; exit 3"));
      expect(err).toBeInstanceOf(CommandExitError);
      expect(err).toMatchObject({ exitCode: 3, stdout: "partial\n", stderr: "broken\n", error: "exit status 3" });
    });

    it("background + wait, for a success and a failure", async () => {
      const h = track(await sandbox.commands.run("sleep 0.3; echo finished", { background: true }));
      expect(h.pid).toBeGreaterThan(0);
      expect(await h.wait()).toMatchObject({ exitCode: 0, stdout: "finished\n" });
      const bad = track(await sandbox.commands.run("echo bye >&2; exit 42", { background: true }));
      const err = await rejection(bad.wait());
      expect(err).toBeInstanceOf(CommandExitError);
      expect(err).toMatchObject({ exitCode: 42, stderr: "bye\n" });
    });

    it("stdin: sendStdin feeds the process and closeStdin ends its input", async () => {
      const out: string[] = [];
      const h = track(await sandbox.commands.run("cat", { background: true, stdin: true, onStdout: (d) => void out.push(d) }));
      await sandbox.commands.sendStdin(h.pid, "hello\n");
      await waitFor(() => out.join("") === "hello\n", "the first echo");
      await h.sendStdin(enc("wörld\n"));
      await waitFor(() => out.join("") === "hello\nwörld\n", "the second echo");
      expect(h.exitCode).toBeUndefined();
      await sandbox.commands.closeStdin(h.pid);
      expect(await h.wait()).toMatchObject({ exitCode: 0, stdout: "hello\nwörld\n" });
    });

    it("connects to a running command by pid from a second Sandbox.connect object", async () => {
      const h = track(await sandbox.commands.run("cat", { background: true, stdin: true }));
      const other = await Sandbox.connect(sandbox.sandboxId);
      const seen: string[] = [];
      const attached = await other.commands.connect(h.pid, { onStdout: (d) => void seen.push(d) });
      expect(attached.pid).toBe(h.pid);
      await other.commands.sendStdin(h.pid, "ping\n");
      await waitFor(() => seen.join("") === "ping\n", "output on the attached handle");
      await attached.closeStdin();
      expect(await attached.wait()).toMatchObject({ exitCode: 0, stdout: "ping\n" });
      expect(await h.wait()).toMatchObject({ exitCode: 0, stdout: "ping\n" });
    });

    it("lists a running command; kill is true while it runs and false once it is gone", async () => {
      const cmd = `sleep 300 # list-marker-${n++}`;
      const h = track(await sandbox.commands.run(cmd, { background: true, cwd: "/tmp", envs: { LIST_ENV: "yes" } }));
      // (cwd is listed as requested: like E2B's envd, the list echoes the start request's config.)
      const p = (await sandbox.commands.list()).find((x) => x.pid === h.pid);
      expect(p).toMatchObject({ pid: h.pid, cmd: "/bin/bash", args: ["-l", "-c", cmd], cwd: "/tmp" });
      expect(p!.envs).toMatchObject({ LIST_ENV: "yes" });

      expect(await sandbox.commands.kill(h.pid)).toBe(true);
      expect(await rejection(h.wait())).toMatchObject({ exitCode: -1 });
      await waitFor(async () => !(await isRunning(h.pid)), "the killed command to leave the list");
      expect(await sandbox.commands.kill(h.pid)).toBe(false);
      expect(await sandbox.commands.kill(99_999_999)).toBe(false);
    });

    it("runs as `user` by default, in /home/user; as root and in another cwd when asked", async () => {
      const r = await sandbox.commands.run('whoami; id -u; echo "$HOME"; pwd');
      const [who, uid, home, pwd] = r.stdout.trim().split("\n");
      expect({ who, home, pwd }).toEqual({ who: "user", home: "/home/user", pwd: "/home/user" });
      expect(Number(uid)).toBeGreaterThan(0);
      expect((await sandbox.commands.run("whoami; id -u", { user: "root" })).stdout).toBe("root\n0\n");
      expect((await sandbox.commands.run("pwd", { cwd: "/tmp" })).stdout).toBe("/tmp\n");
      const dir = await fresh();
      expect((await sandbox.commands.run("pwd", { cwd: dir, user: "root" })).stdout).toBe(`${dir}\n`);
    });
  });

  describe("pty", { timeout: o.timeoutMs }, () => {
    it("create, sendInput, resize, kill", async () => {
      const term = terminal();
      const pty = track(await sandbox.pty.create({ cols: 80, rows: 24, onData: term.onData }));
      expect(pty.pid).toBeGreaterThan(0);
      await sandbox.pty.sendInput(pty.pid, enc("echo $((6*7)) $(whoami)\n"));
      await waitFor(() => /[\r\n]42 user\r?\n/.test(term.text()), '"42 user" in the terminal');
      await sandbox.pty.sendInput(pty.pid, enc("stty size\n"));
      await waitFor(() => term.text().includes("24 80"), "the initial size");
      await sandbox.pty.resize(pty.pid, { cols: 100, rows: 30 });
      await sandbox.pty.sendInput(pty.pid, enc("stty size\n"));
      await waitFor(() => term.text().includes("30 100"), "the new size");

      expect(await sandbox.pty.kill(pty.pid)).toBe(true);
      const err = await rejection(pty.wait());
      expect(err).toBeInstanceOf(CommandExitError);
      expect(err).toMatchObject({ exitCode: -1 });
      await waitFor(async () => !(await isRunning(pty.pid)), "the killed pty to leave the list");
      expect(await sandbox.pty.kill(pty.pid)).toBe(false);
    });
  });

  describe("files", { timeout: o.timeoutMs }, () => {
    it("writes and reads text and bytes, owned by `user`", async () => {
      const dir = await fresh();
      const text = "héllo wörld ✓\nsecond line\n";
      expect(await sandbox.files.write(`${dir}/hello.txt`, text)).toMatchObject({ name: "hello.txt", path: `${dir}/hello.txt`, type: FileType.FILE });
      expect(await sandbox.files.read(`${dir}/hello.txt`)).toBe(text);
      const bytes = new Uint8Array(1024).map((_, i) => i % 256);
      await sandbox.files.write(`${dir}/bytes.bin`, bytes.slice().buffer as ArrayBuffer);
      expect(Array.from(await sandbox.files.read(`${dir}/bytes.bin`, { format: "bytes" }))).toEqual(Array.from(bytes));
      expect((await sandbox.commands.run(`stat -c %U ${dir}/hello.txt`)).stdout).toBe("user\n");
      expect(await sandbox.files.getInfo(`${dir}/hello.txt`)).toMatchObject({ name: "hello.txt", type: FileType.FILE, size: Buffer.byteLength(text), owner: "user" });
    });

    it("list, makeDir, rename, remove, exists, getInfo", async () => {
      const dir = await fresh();
      expect(await sandbox.files.makeDir(`${dir}/sub/deeper`)).toBe(true);
      expect(await sandbox.files.makeDir(`${dir}/sub`)).toBe(false); // already there
      await sandbox.files.write(`${dir}/a.txt`, "A");
      const entries = await sandbox.files.list(dir);
      expect(entries.map((e) => [e.name, e.type]).sort()).toEqual([
        ["a.txt", FileType.FILE],
        ["sub", FileType.DIR],
      ]);
      expect((await sandbox.files.getInfo(`${dir}/sub`)).type).toBe(FileType.DIR);

      const moved = await sandbox.files.rename(`${dir}/a.txt`, `${dir}/sub/b.txt`);
      expect(moved).toMatchObject({ name: "b.txt", path: `${dir}/sub/b.txt` });
      expect(await sandbox.files.exists(`${dir}/a.txt`)).toBe(false);
      expect(await sandbox.files.exists(`${dir}/sub/b.txt`)).toBe(true);
      expect(await sandbox.files.read(`${dir}/sub/b.txt`)).toBe("A");

      await sandbox.files.remove(`${dir}/sub`);
      expect(await sandbox.files.exists(`${dir}/sub`)).toBe(false);
      expect((await sandbox.files.list(dir)).map((e) => e.name)).toEqual([]);
    });

    it("watchDir reports create and write events", async () => {
      const dir = await fresh();
      const events: FilesystemEvent[] = [];
      const has = (name: string, type: FilesystemEventType) => events.some((e) => e.name === name && e.type === type);
      const seen = () => JSON.stringify(events.map((e) => [e.type, e.name]));
      watches.push(await sandbox.files.watchDir(dir, (e) => void events.push(e)));
      await sandbox.files.write(`${dir}/w.txt`, "1");
      await waitFor(() => has("w.txt", FilesystemEventType.CREATE), () => `create w.txt; saw ${seen()}`);
      await sandbox.commands.run(`echo more >> ${dir}/w.txt`);
      await waitFor(() => has("w.txt", FilesystemEventType.WRITE), () => `write w.txt; saw ${seen()}`);
    });

    it("round-trips 64 MiB streamed both ways with the same sha256", { timeout: 600_000 }, async () => {
      const path = `${await fresh()}/big.bin`;
      const size = 64 * 1024 * 1024;
      const sent = createHash("sha256");
      expect(await sandbox.files.write(path, pseudoRandomStream(size, 0x2b2b2b2b, sent))).toMatchObject({ path, type: FileType.FILE });
      const digest = sent.digest("hex");

      const received = createHash("sha256");
      let bytes = 0;
      for await (const chunk of (await sandbox.files.read(path, { format: "stream" })) as unknown as AsyncIterable<Uint8Array>) {
        bytes += chunk.length;
        received.update(chunk);
      }
      expect(bytes).toBe(size);
      expect(received.digest("hex")).toBe(digest);
      expect((await sandbox.files.getInfo(path)).size).toBe(size);
      expect((await sandbox.commands.run(`sha256sum ${path}`)).stdout.split(" ")[0]).toBe(digest);
      await sandbox.files.remove(path);
    });

    it("a large file downloaded without gzip (envd's sendfile path) arrives whole through the proxy", { timeout: 600_000 }, async () => {
      const path = `${await fresh()}/big-identity.bin`;
      // Past envd's sendfile threshold (16 MiB), odd-sized.
      const r = await sandbox.commands.run(`head -c 17000001 /dev/urandom > ${path} && sha256sum ${path}`);
      const digest = r.stdout.split(" ")[0];
      const url = await sandbox.downloadUrl(path);
      const got = await new Promise<{ status: number; encoding?: string; bytes: number; sha: string }>((resolve, reject) => {
        // No Accept-Encoding (fetch would ask for gzip): identity, with a Content-Length.
        http.get(url, (res) => {
          const h = createHash("sha256");
          let bytes = 0;
          res.on("data", (c: Buffer) => ((bytes += c.length), h.update(c)));
          res.on("end", () => resolve({ status: res.statusCode!, encoding: res.headers["content-encoding"], bytes, sha: h.digest("hex") }));
          res.on("error", reject);
        }).on("error", reject);
      });
      expect(got).toEqual({ status: 200, encoding: undefined, bytes: 17000001, sha: digest });
      await sandbox.files.remove(path);
    });

    it("large octet-stream uploads arrive whole through the proxy: the SDK's (chunked) and one with a Content-Length (envd's splice path)", { timeout: 600_000 }, async () => {
      const dir = await fresh();
      // Past envd's splice threshold (16 MiB), odd-sized.
      const data = Buffer.alloc(17_000_003);
      for (let i = 0; i < data.length; i += 4096) data.writeUInt32LE((i * 2654435761) >>> 0, i);
      const digest = createHash("sha256").update(data).digest("hex");
      const sums = async (...paths: string[]) => (await sandbox.commands.run(`sha256sum ${paths.join(" ")}`)).stdout.split("\n").filter(Boolean).map((l) => l.split(" ")[0]);

      // The SDK streams a Blob with Transfer-Encoding: chunked (envd copies it).
      expect(await sandbox.files.write(`${dir}/sdk.bin`, new Blob([data]), { useOctetStream: true })).toMatchObject({ type: FileType.FILE });
      // curl --data-binary, requests' data=: a Content-Length, which the proxy keeps (envd splices it).
      const url = await sandbox.uploadUrl(`${dir}/raw.bin`);
      const status = await new Promise<number>((resolve, reject) => {
        const req = http.request(url, { method: "POST", headers: { "content-type": "application/octet-stream", "content-length": String(data.length) } }, (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode!));
        });
        req.on("error", reject);
        req.end(data);
      });
      expect(status).toBe(200);
      expect(await sums(`${dir}/sdk.bin`, `${dir}/raw.bin`)).toEqual([digest, digest]);
      await sandbox.files.remove(dir);
    });

    it("signed uploadUrl()/downloadUrl() work with plain fetch and no sandbox headers", async () => {
      const dir = await fresh();
      await sandbox.files.write(`${dir}/down.txt`, "download me");
      const down = await sandbox.downloadUrl(`${dir}/down.txt`);
      expect(down.startsWith(`${cp.url}/files?`)).toBe(true);
      expect(new URL(down).searchParams.get("signature")).toMatch(/^v1_/);
      const res = await fetch(down);
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("download me");

      const up = await sandbox.uploadUrl(`${dir}/up.txt`, { useSignatureExpiration: 120 });
      const form = new FormData();
      form.append("file", new Blob(["uploaded via url"]), "up.txt");
      expect((await fetch(up, { method: "POST", body: form })).status).toBe(200);
      expect(await sandbox.files.read(`${dir}/up.txt`)).toBe("uploaded via url");
      expect((await sandbox.files.getInfo(`${dir}/up.txt`)).owner).toBe("user");

      // A signature for another path (or a tampered one) opens nothing.
      const forged = new URL(down);
      forged.searchParams.set("path", "/etc/shadow");
      expect((await fetch(forged)).status).toBe(401);
      const tampered = new URL(down);
      tampered.searchParams.set("signature", "v1_AAAA");
      expect((await fetch(tampered)).status).toBe(401);
    });
  });
}
