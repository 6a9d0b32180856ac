// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The real `e2b` JS SDK (commands and pty) against a real envd, in debug mode
// (E2B_DEBUG=true + E2B_SANDBOX_URL, see test/helpers/sdk.ts).
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  AuthenticationError,
  CommandExitError,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
  SandboxError,
  TimeoutError,
  type CommandHandle,
} from "e2b";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { rejection, startSdkSandbox, terminal, waitFor, type SdkSandbox } from "../helpers/sdk.js";

let env: SdkSandbox;
let sandbox: Sandbox;
let n = 0;
/** Background commands and PTYs started by the current test, killed after it. */
let started: number[] = [];

beforeAll(async () => {
  env = await startSdkSandbox();
  sandbox = env.sandbox;
});
afterEach(async () => {
  for (const pid of started) await sandbox.commands.kill(pid).catch(() => false);
  started = [];
});
afterAll(async () => {
  await env?.close();
});

function fresh(): string {
  const dir = join(env.envd.dir, `cmd-${n++}`);
  mkdirSync(dir);
  return dir;
}

function track<T extends CommandHandle>(h: T): T {
  started.push(h.pid);
  return h;
}

const enc = (s: string) => new TextEncoder().encode(s);
const isRunning = async (pid: number) => (await sandbox.commands.list()).some((p) => p.pid === pid);

describe("commands.run", () => {
  it("returns stdout, stderr and exit code 0", async () => {
    const r = await sandbox.commands.run("echo hello; echo oops >&2");
    expect(r).toMatchObject({ exitCode: 0, stdout: "hello\n", stderr: "oops\n" });
    expect(r.error).toBeFalsy();
  });

  it("streams stdout and stderr to the callbacks while the command runs", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const h = track(
      await sandbox.commands.run("echo first; echo warn >&2; read line; echo \"got $line\"; echo done >&2", {
        background: true,
        stdin: true,
        onStdout: (d) => void out.push(d),
        onStderr: (d) => void err.push(d),
      }),
    );
    // Output arrives before the command ends: it is blocked on stdin here.
    await waitFor(() => out.join("") === "first\n" && err.join("") === "warn\n", "the first chunks");
    expect(h.exitCode).toBeUndefined();
    await h.sendStdin("go\n");
    const r = await h.wait();
    expect(out.join("")).toBe("first\ngot go\n");
    expect(err.join("")).toBe("warn\ndone\n");
    expect(r).toMatchObject({ exitCode: 0, stdout: "first\ngot go\n", stderr: "warn\ndone\n" });
    expect(h.stdout).toBe(r.stdout);
    expect(h.exitCode).toBe(0);
  });

  it("delivers large output in several chunks that concatenate exactly", async () => {
    const chunks: string[] = [];
    const r = await sandbox.commands.run("seq 1 100000", { onStdout: (d) => void chunks.push(d) });
    const expected = Array.from({ length: 100000 }, (_, i) => `${i + 1}\n`).join("");
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.join("")).toBe(expected);
    expect(r.stdout).toBe(expected);
  });

  it("keeps multi-byte UTF-8 intact across chunk boundaries", async () => {
    const chunks: string[] = [];
    const r = await sandbox.commands.run("yes '€😀ž' | head -n 40000 | tr -d '\\n'", {
      onStdout: (d) => void chunks.push(d),
    });
    const expected = "€😀ž".repeat(40000);
    expect(r.stdout).toBe(expected);
    expect(chunks.join("")).toBe(expected);
  });

  it("throws CommandExitError with exit code, output and error for a non-zero exit", async () => {
    const err = await rejection(sandbox.commands.run("echo partial; echo broken >&2; exit 3"));
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toBeInstanceOf(SandboxError);
    const e = err as CommandExitError;
    expect(e.exitCode).toBe(3);
    expect(e.stdout).toBe("partial\n");
    expect(e.stderr).toBe("broken\n");
    expect(e.error).toBe("exit status 3");
  });

  it("runs in the given cwd, and in the user's home by default", async () => {
    const dir = fresh();
    expect((await sandbox.commands.run("pwd", { cwd: dir })).stdout).toBe(`${dir}\n`);
    const r = await sandbox.commands.run('pwd; echo "$HOME"');
    const [pwd, home] = r.stdout.trim().split("\n");
    expect(home).toMatch(/^\//);
    expect(pwd).toBe(home);
  });

  it("rejects a cwd that does not exist with InvalidArgumentError", async () => {
    const err = await rejection(sandbox.commands.run("true", { cwd: join(env.envd.dir, "no-such-dir") }));
    expect(err).toBeInstanceOf(InvalidArgumentError);
  });

  it("passes envs, on top of the sandbox's own (E2B_SANDBOX=true)", async () => {
    const r = await sandbox.commands.run('echo "$FOO|$WITH_SPACE|$E2B_SANDBOX"', {
      envs: { FOO: "bar", WITH_SPACE: "a b  c" },
    });
    expect(r.stdout).toBe("bar|a b  c|true\n");
    // Envs do not leak into later commands.
    expect((await sandbox.commands.run('echo "[$FOO]"')).stdout).toBe("[]\n");
  });

  it("runs as root by default and as another user when asked", async () => {
    expect((await sandbox.commands.run("whoami")).stdout).toBe("root\n");
    // The uid, and USER and HOME from envd's passwd (the test's own: test/helpers/accounts.ts), not the host's name for it.
    const r = await sandbox.commands.run('id -u; echo "$USER"; echo "$HOME"; pwd', { user: "nobody", cwd: "/tmp" });
    expect(r.stdout.split("\n")).toEqual(["65534", "nobody", "/nonexistent", "/tmp", ""]);
  });

  it("creates files owned by the user the command runs as", async () => {
    const path = `/tmp/locale2b-sdk-owner-${process.pid}-${n++}`;
    try {
      await sandbox.commands.run(`touch ${path}`, { user: "nobody", cwd: "/tmp" });
      const info = await sandbox.files.getInfo(path);
      expect(info.owner).toBe("nobody");
    } finally {
      await sandbox.files.remove(path);
    }
  });

  it("rejects an unknown user with AuthenticationError", async () => {
    const err = await rejection(sandbox.commands.run("true", { user: "no-such-user-locale2b" }));
    expect(err).toBeInstanceOf(AuthenticationError);
  });

  it("runs in the background and wait() returns the result", async () => {
    const out: string[] = [];
    const h = track(
      await sandbox.commands.run("sleep 0.5; echo finished", { background: true, onStdout: (d) => void out.push(d) }),
    );
    expect(h.pid).toBeGreaterThan(0);
    const r = await h.wait();
    expect(r).toMatchObject({ exitCode: 0, stdout: "finished\n", stderr: "" });
    expect(out.join("")).toBe("finished\n");
  });

  it("wait() on a failed background command throws CommandExitError", async () => {
    const h = track(await sandbox.commands.run("echo bye >&2; exit 42", { background: true }));
    const err = await rejection(h.wait());
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: 42, stderr: "bye\n", stdout: "" });
  });
});

describe("stdin", () => {
  it("without stdin: true the command reads EOF instead of hanging", async () => {
    const r = await sandbox.commands.run("cat; echo eof");
    expect(r).toMatchObject({ exitCode: 0, stdout: "eof\n" });
  });

  it("sendStdin feeds the process and closeStdin ends its input", async () => {
    const out: string[] = [];
    const h = track(
      await sandbox.commands.run("cat", { background: true, stdin: true, onStdout: (d) => void out.push(d) }),
    );
    await sandbox.commands.sendStdin(h.pid, "hello\n");
    await waitFor(() => out.join("") === "hello\n", "the first echo");
    await h.sendStdin(enc("wörld\n"));
    await waitFor(() => out.join("") === "hello\nwörld\n", "the second echo");
    expect(h.exitCode).toBeUndefined();
    await sandbox.commands.closeStdin(h.pid);
    const r = await h.wait();
    expect(r).toMatchObject({ exitCode: 0, stdout: "hello\nwörld\n" });
  });

  it("sendStdin to a command started without stdin fails", async () => {
    const h = track(await sandbox.commands.run("sleep 30", { background: true }));
    const err = await rejection(sandbox.commands.sendStdin(h.pid, "x"));
    expect(err).toBeInstanceOf(SandboxError);
  });

  it("sendStdin and closeStdin to an unknown pid fail with NotFoundError", async () => {
    expect(await rejection(sandbox.commands.sendStdin(99_999_999, "x"))).toBeInstanceOf(NotFoundError);
    expect(await rejection(sandbox.commands.closeStdin(99_999_999))).toBeInstanceOf(NotFoundError);
  });
});

describe("connect, list, kill", () => {
  it("connects to a running background command by pid, from another Sandbox object", async () => {
    const h = track(await sandbox.commands.run("cat", { background: true, stdin: true }));
    const other = await Sandbox.connect(sandbox.sandboxId);
    const seen: string[] = [];
    const attached = await other.commands.connect(h.pid, { onStdout: (d) => void seen.push(d) });
    expect(attached.pid).toBe(h.pid);

    await other.commands.sendStdin(h.pid, "ping\n");
    await waitFor(() => seen.join("") === "ping\n", "output on the attached handle");
    await attached.closeStdin();

    const r = await attached.wait();
    expect(r).toMatchObject({ exitCode: 0, stdout: "ping\n" });
    // The original handle saw the same output and the same end.
    expect(await h.wait()).toMatchObject({ exitCode: 0, stdout: "ping\n" });
  });

  it("disconnect() detaches without stopping the command", async () => {
    const h = track(await sandbox.commands.run("cat", { background: true, stdin: true }));
    const attached = await sandbox.commands.connect(h.pid);
    await attached.disconnect();
    expect(await isRunning(h.pid)).toBe(true);
    await sandbox.commands.sendStdin(h.pid, "still here\n");
    await sandbox.commands.closeStdin(h.pid);
    expect(await h.wait()).toMatchObject({ exitCode: 0, stdout: "still here\n" });
  });

  it("connecting to an unknown pid fails with NotFoundError", async () => {
    const err = await rejection(sandbox.commands.connect(99_999_999));
    expect(err).toBeInstanceOf(NotFoundError);
  });

  it("lists a running background command with its cmd, args, envs and cwd", async () => {
    const dir = fresh();
    const cmd = "sleep 30 # list-marker";
    const h = track(await sandbox.commands.run(cmd, { background: true, cwd: dir, envs: { LIST_ENV: "yes" } }));
    const list = await sandbox.commands.list();
    const p = list.find((x) => x.pid === h.pid);
    expect(p).toBeDefined();
    expect(p).toMatchObject({ pid: h.pid, cmd: "/bin/bash", args: ["-l", "-c", cmd], cwd: dir });
    expect(p!.envs).toMatchObject({ LIST_ENV: "yes" });
  });

  it("kill() returns true for a running command, which then ends killed; false once it is gone", async () => {
    const h = track(await sandbox.commands.run("sleep 30", { background: true }));
    expect(await sandbox.commands.kill(h.pid)).toBe(true);
    const err = await rejection(h.wait());
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: -1, error: "signal: killed" });
    await waitFor(async () => !(await isRunning(h.pid)), "the killed command to leave the list");
    expect(await sandbox.commands.kill(h.pid)).toBe(false);
    expect(await sandbox.commands.kill(99_999_999)).toBe(false);
  });

  it("handle.kill() kills the command", async () => {
    const h = track(await sandbox.commands.run("sleep 30", { background: true }));
    expect(await h.kill()).toBe(true);
    expect(await rejection(h.wait())).toMatchObject({ exitCode: -1 });
  });

  it("connecting right after a command ended reports its result", async () => {
    const h = track(await sandbox.commands.run("echo gone; exit 7", { background: true }));
    await rejection(h.wait());
    const again = await sandbox.commands.connect(h.pid);
    expect(again.pid).toBe(h.pid);
    const err = await rejection(again.wait());
    expect(err).toBeInstanceOf(CommandExitError);
    expect(err).toMatchObject({ exitCode: 7 });
  });
});

describe("timeoutMs", () => {
  it("a foreground command that outlives timeoutMs fails with TimeoutError and is killed", async () => {
    const cmd = `sleep 30 # timeout-marker-${n++}`;
    const err = await rejection(sandbox.commands.run(cmd, { timeoutMs: 1000 }));
    expect(err).toBeInstanceOf(TimeoutError);
    await waitFor(
      async () => !(await sandbox.commands.list()).some((p) => p.args.includes(cmd)),
      "the timed-out command to be gone",
    );
  });

  it("a background command that outlives timeoutMs is killed: wait() throws TimeoutError", async () => {
    const h = track(await sandbox.commands.run("sleep 30", { background: true, timeoutMs: 1000 }));
    const err = await rejection(h.wait());
    expect(err).toBeInstanceOf(TimeoutError);
    await waitFor(async () => !(await isRunning(h.pid)), "the timed-out command to leave the list");
    // The process itself is gone, not only the stream.
    const probe = await rejection(sandbox.commands.run(`kill -0 ${h.pid}`));
    expect(probe).toMatchObject({ exitCode: 1 });
  });

  it("timeoutMs: 0 means no limit", async () => {
    const r = await sandbox.commands.run("sleep 1.5; echo ok", { timeoutMs: 0 });
    expect(r.stdout).toBe("ok\n");
  });
});

describe("pty", () => {
  it("runs an interactive shell: input, output, resize, kill", async () => {
    const term = terminal();
    const pty = track(await sandbox.pty.create({ cols: 80, rows: 24, onData: term.onData }));
    expect(pty.pid).toBeGreaterThan(0);

    await sandbox.pty.sendInput(pty.pid, enc("echo $((6*7))\n"));
    // The output line is "42" (after the echoed input and bash's escape sequences).
    await waitFor(() => /[\r\n]42\r?\n/.test(term.text()), '"42" in the terminal');

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

  it("is a real terminal with TERM set, in the given cwd with the given envs", async () => {
    const dir = fresh();
    const term = terminal();
    const pty = track(
      await sandbox.pty.create({ cols: 120, rows: 40, onData: term.onData, cwd: dir, envs: { PTY_VAR: "pv" } }),
    );
    await sandbox.pty.sendInput(pty.pid, enc('echo "[$(test -t 0 && echo tty)|$TERM|$PTY_VAR|$(pwd)]"\n'));
    await waitFor(() => term.text().includes(`[tty|xterm-256color|pv|${dir}]`), "the probe line");
  });

  it("ends with the shell's exit code", async () => {
    const term = terminal();
    const pty = track(await sandbox.pty.create({ cols: 80, rows: 24, onData: term.onData }));
    await sandbox.pty.sendInput(pty.pid, enc("exit 0\n"));
    expect(await pty.wait()).toMatchObject({ exitCode: 0 });

    const pty2 = track(await sandbox.pty.create({ cols: 80, rows: 24, onData: () => {} }));
    await sandbox.pty.sendInput(pty2.pid, enc("exit 5\n"));
    expect(await rejection(pty2.wait())).toMatchObject({ exitCode: 5 });
  });

  it("pty.connect attaches to a running terminal", async () => {
    const pty = track(await sandbox.pty.create({ cols: 80, rows: 24, onData: () => {} }));
    const term = terminal();
    const attached = await sandbox.pty.connect(pty.pid, { onData: term.onData });
    await sandbox.pty.sendInput(pty.pid, enc("echo attached-$((2+3))\n"));
    await waitFor(() => term.text().includes("attached-5"), "output on the attached handle");
    await attached.disconnect();
  });

  it("resize and sendInput on an unknown pid fail with NotFoundError", async () => {
    expect(await rejection(sandbox.pty.resize(99_999_999, { cols: 10, rows: 10 }))).toBeInstanceOf(NotFoundError);
    expect(await rejection(sandbox.pty.sendInput(99_999_999, enc("x")))).toBeInstanceOf(NotFoundError);
  });
});
