// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { Code, ConnectError } from "@connectrpc/connect";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Signal, type StreamInputRequestSchema } from "../../gen/ts/process/process_pb.js";
import { basicAuth, clients, PROTOCOLS, startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { collect, readUntil, run, sh } from "../helpers/process.js";

let envd: TestEnvd;
beforeAll(async () => {
  envd = await startTestEnvd();
});
afterAll(async () => {
  await envd?.close();
});

async function codeOf(p: Promise<unknown> | (() => Promise<unknown>)): Promise<Code | undefined> {
  try {
    await (typeof p === "function" ? p() : p);
  } catch (err) {
    return ConnectError.from(err).code;
  }
  return undefined;
}

describe.each(PROTOCOLS)("process over %s", (protocol) => {
  it("streams start, separate stdout/stderr and the exit code", async () => {
    const { process } = clients(envd.url, protocol);
    const r = await run(process, "echo hello; echo oops >&2; exit 3");
    expect(r.events[0]).toBe("start");
    expect(r.events.at(-1)).toBe("end");
    expect(r.pid).toBeGreaterThan(0);
    expect(r.stdout).toBe("hello\n");
    expect(r.stderr).toBe("oops\n");
    expect(r.end).toMatchObject({ exitCode: 3, exited: true, status: "exit status 3", error: "exit status 3" });
  });

  it("lists a running process and kills it", async () => {
    const { process } = clients(envd.url, protocol);
    const it = process.start(sh("echo up; sleep 100"), {})[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("up"));
    const list = await process.list({});
    expect(list.processes.map((p) => p.pid)).toContain(pid);
    await process.sendSignal({ process: { selector: { case: "pid", value: pid } }, signal: Signal.SIGKILL });
    const rest = await collect({ [Symbol.asyncIterator]: () => it });
    expect(rest.end).toMatchObject({ exitCode: -1, exited: false, status: "signal: killed" });
  });
});

describe("process semantics", () => {
  it("exit 0 leaves exitCode 0 and no error", async () => {
    const { process } = clients(envd.url);
    const r = await run(process, "true");
    expect(r.end?.exitCode).toBe(0);
    expect(r.end?.exited).toBe(true);
    expect(r.end?.status).toBe("exit status 0");
    expect(r.end?.error).toBeUndefined();
  });

  it("runs in cwd with request envs over the sandbox's env vars", async () => {
    const { process } = clients(envd.url);
    envd.context.state.envVars = { FROM_INIT: "init", OVERRIDE: "init" };
    try {
      const r = await run(process, 'pwd; echo "$FROM_INIT $OVERRIDE $E2B_SANDBOX $HOME $USER"', {
        process: { cmd: "/bin/sh", args: ["-c", 'pwd; echo "$FROM_INIT $OVERRIDE $E2B_SANDBOX $HOME $USER"'], cwd: envd.dir, envs: { OVERRIDE: "req" } },
      });
      expect(r.stdout).toBe(`${envd.dir}\ninit req true /root root\n`);
    } finally {
      envd.context.state.envVars = {};
    }
  });

  it("defaults cwd to the user's home and refuses a missing cwd", async () => {
    const { process } = clients(envd.url);
    expect((await run(process, "pwd")).stdout).toBe("/root\n");
    const code = await codeOf(run(process, "pwd", { process: { cmd: "/bin/sh", args: ["-c", "pwd"], cwd: "/no/such/dir" } }));
    expect(code).toBe(Code.InvalidArgument);
  });

  it("runs as the Basic-auth user and refuses unknown users", async () => {
    const { process } = clients(envd.url);
    // The uid, and HOME and USER from envd's passwd (the test's own: test/helpers/accounts.ts), not the host's name for it.
    const cmd = "id -u; echo $HOME $USER";
    const r = await run(process, cmd, { process: { cmd: "/bin/sh", args: ["-c", cmd], cwd: "/tmp" } }, basicAuth("nobody"));
    expect(r.stdout).toBe("65534\n/nonexistent nobody\n");
    // envd resolves the default cwd to the user's home, which must exist.
    expect(await codeOf(run(process, "true", {}, basicAuth("nobody")))).toBe(Code.InvalidArgument);
    expect(await codeOf(run(process, "true", {}, basicAuth("no-such-user")))).toBe(Code.Unauthenticated);
    expect(await codeOf(process.list({}, { headers: basicAuth("no-such-user") }))).toBe(Code.Unauthenticated);
  });

  it("starts a command that does not exist as E2B's envd does: start, a stderr line, exit 127", async () => {
    const { process } = clients(envd.url);
    for (const cmd of ["/no/such/binary", "no-such-command-anywhere"]) {
      const r = await collect(process.start({ process: { cmd, args: ["x"] }, stdin: false }));
      expect(r.events[0]).toBe("start");
      expect(r.pid).toBeGreaterThan(0);
      expect(r.events.at(-1)).toBe("end");
      expect(r.stderr).toBe(`envd: '${cmd}': No such file or directory\n`);
      expect(r.stdout).toBe("");
      expect(r.end).toMatchObject({ exitCode: 127, exited: true, status: "exit status 127", error: "exit status 127" });
    }
    // It exists but may not be executed: 126, as the shells and `nice` exit.
    const file = join(envd.dir, "not-executable");
    writeFileSync(file, "echo hi\n", { mode: 0o644 });
    const notExecutable = await collect(process.start({ process: { cmd: file, args: [] }, stdin: false }));
    expect(notExecutable.stderr).toBe(`envd: '${file}': Permission denied\n`);
    expect(notExecutable.end?.exitCode).toBe(126);
    // In a PTY the line comes as PTY output.
    const pty = await collect(process.start({ process: { cmd: "/no/such/binary", args: [] }, pty: { size: { cols: 80, rows: 24 } } }));
    expect(pty.events[0]).toBe("start");
    expect(pty.pty).toBe("envd: '/no/such/binary': No such file or directory\r\n");
    expect(pty.end?.exitCode).toBe(127);
  });

  it("refuses NUL bytes in the command, its arguments or its env vars with invalid_argument", async () => {
    const { process } = clients(envd.url);
    for (const config of [
      { cmd: "/bin/echo\0", args: [] },
      { cmd: "/bin/echo", args: ["ok", "a\0b"] },
      { cmd: "/bin/echo", args: [], envs: { K: "v\0" } },
    ]) {
      const err = await collect(process.start({ process: config })).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code).toBe(Code.InvalidArgument);
      expect(err?.rawMessage).toMatch(/^process\.(cmd|args\[1\]|envs\["K"\]) contains a NUL byte.*remove it$/);
    }
  });

  it("pipes stdin by default, and SendInput + CloseStdin reach the process", async () => {
    const { process } = clients(envd.url);
    const it = process.start({ process: { cmd: "/bin/sh", args: ["-c", "echo ready; cat"] } })[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("ready"));
    const sel = { selector: { case: "pid" as const, value: pid } };
    await process.sendInput({ process: sel, input: { input: { case: "stdin", value: new TextEncoder().encode("abc\n") } } });
    await readUntil(it, (t) => t.includes("abc"));
    await process.closeStdin({ process: sel });
    const rest = await collect({ [Symbol.asyncIterator]: () => it });
    expect(rest.end?.exitCode).toBe(0);
  });

  it("stdin: false gives the process /dev/null and SendInput fails", async () => {
    const { process } = clients(envd.url);
    const r = await run(process, "cat; echo done", { stdin: false });
    expect(r.stdout).toBe("done\n");
    const it = process.start(sh("echo up; sleep 30", { stdin: false }))[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("up"));
    const sel = { selector: { case: "pid" as const, value: pid } };
    const code = await codeOf(process.sendInput({ process: sel, input: { input: { case: "stdin", value: new Uint8Array([1]) } } }));
    expect(code).toBe(Code.Internal);
    await process.sendSignal({ process: sel, signal: Signal.SIGKILL });
    await collect({ [Symbol.asyncIterator]: () => it });
  });

  it("StreamInput (client stream) feeds stdin", async () => {
    const { process } = clients(envd.url, "connect-json");
    const it = process.start({ process: { cmd: "/bin/sh", args: ["-c", "echo ready; head -n 2"] }, stdin: true })[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("ready"));
    const enc = new TextEncoder();
    async function* input(): AsyncGenerator<MessageInitShape<typeof StreamInputRequestSchema>> {
      yield { event: { case: "start" as const, value: { process: { selector: { case: "pid" as const, value: pid } } } } };
      yield { event: { case: "data" as const, value: { input: { input: { case: "stdin" as const, value: enc.encode("one\n") } } } } };
      yield { event: { case: "keepalive" as const, value: {} } };
      yield { event: { case: "data" as const, value: { input: { input: { case: "stdin" as const, value: enc.encode("two\n") } } } } };
    }
    await process.streamInput(input());
    const rest = await collect({ [Symbol.asyncIterator]: () => it });
    expect(rest.stdout).toBe("one\ntwo\n");
    expect(rest.end?.exitCode).toBe(0);
  });

  it("SIGTERM ends with signal: terminated; unknown pid and bad signal are refused", async () => {
    const { process } = clients(envd.url);
    const it = process.start(sh("echo up; exec sleep 100"))[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("up"));
    const sel = { selector: { case: "pid" as const, value: pid } };
    expect(await codeOf(process.sendSignal({ process: sel, signal: Signal.UNSPECIFIED }))).toBe(Code.Unimplemented);
    await process.sendSignal({ process: sel, signal: Signal.SIGTERM });
    const rest = await collect({ [Symbol.asyncIterator]: () => it });
    expect(rest.end).toMatchObject({ exitCode: -1, exited: false, status: "signal: terminated" });
    const gone = { selector: { case: "pid" as const, value: 999999 } };
    expect(await codeOf(process.sendSignal({ process: gone, signal: Signal.SIGKILL }))).toBe(Code.NotFound);
    expect(await codeOf(process.sendInput({ process: gone, input: { input: { case: "stdin", value: new Uint8Array([1]) } } }))).toBe(Code.NotFound);
    expect(await codeOf(process.closeStdin({ process: gone }))).toBe(Code.NotFound);
    expect(await codeOf(process.update({ process: gone, pty: { size: { cols: 1, rows: 1 } } }))).toBe(Code.NotFound);
  });

  it("holds the end while a background child keeps the pipes, and KILL releases it", async () => {
    const { process } = clients(envd.url);
    const it = process.start(sh("sleep 1000 & echo started"))[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("started"));
    // The shell has exited, but its child still holds stdout: the stream stays open.
    await new Promise((r) => setTimeout(r, 300));
    expect((await process.list({})).processes.map((p) => p.pid)).toContain(pid);
    await process.sendSignal({ process: { selector: { case: "pid", value: pid } }, signal: Signal.SIGKILL });
    const rest = await collect({ [Symbol.asyncIterator]: () => it });
    expect(rest.end?.exitCode).toBe(0);
    try {
      globalThis.process.kill(-pid, "SIGKILL"); // the orphaned sleep, in the process group
    } catch {
      // already gone
    }
  });
});
