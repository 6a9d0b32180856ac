// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
import { Code, ConnectError } from "@connectrpc/connect";
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Signal } from "../../gen/ts/process/process_pb.js";
import { clients, startTestEnvd, type TestEnvd } from "../helpers/envd.js";
import { collect, readUntil, sh } from "../helpers/process.js";

let envd: TestEnvd;
beforeAll(async () => {
  envd = await startTestEnvd();
});
afterAll(async () => {
  await envd?.close();
});

const enc = new TextEncoder();
const pidSel = (pid: number) => ({ selector: { case: "pid" as const, value: pid } });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function running(pid: number): Promise<boolean> {
  const { process } = clients(envd.url);
  return (await process.list({})).processes.some((p) => p.pid === pid);
}

describe("pty", () => {
  it("runs an interactive shell: input, output as pty data, resize, exit", async () => {
    const { process } = clients(envd.url);
    const stream = process.start({
      process: { cmd: "/bin/bash", args: ["-i", "-l"], envs: { TERM: "xterm-256color", PS1: "$ " } },
      pty: { size: { cols: 80, rows: 24 } },
    });
    const it = stream[Symbol.asyncIterator]();
    const first = await it.next();
    expect(first.value?.event?.event.case).toBe("start");
    const pid = (first.value!.event!.event.value as { pid: number }).pid;
    await process.sendInput({ process: pidSel(pid), input: { input: { case: "pty", value: enc.encode("echo $((6*7))\n") } } });
    await readUntil(it, (t) => t.includes("42"));
    await process.update({ process: pidSel(pid), pty: { size: { cols: 123, rows: 45 } } });
    await process.sendInput({ process: pidSel(pid), input: { input: { case: "pty", value: enc.encode("stty size\n") } } });
    await readUntil(it, (t) => t.includes("45 123"));
    await process.sendInput({ process: pidSel(pid), input: { input: { case: "pty", value: enc.encode("exit 7\n") } } });
    const rest = await collect({ [Symbol.asyncIterator]: () => it });
    expect(rest.end?.exitCode).toBe(7);
    expect(rest.stdout + rest.stderr).toBe(""); // PTY output only ever comes as pty data
  });

  it("refuses stdin input, CloseStdin and resize where they do not apply", async () => {
    const { process } = clients(envd.url);
    const it = process.start({ process: { cmd: "/bin/sh", args: [] }, pty: { size: { cols: 80, rows: 24 } } })[Symbol.asyncIterator]();
    const pid = ((await it.next()).value!.event!.event.value as { pid: number }).pid;
    const code = async (p: Promise<unknown>) => p.then(() => undefined, (e) => ConnectError.from(e).code);
    expect(await code(process.sendInput({ process: pidSel(pid), input: { input: { case: "stdin", value: enc.encode("x") } } }))).toBe(Code.Internal);
    expect(await code(process.closeStdin({ process: pidSel(pid) }))).toBe(Code.Unknown);
    await process.sendSignal({ process: pidSel(pid), signal: Signal.SIGKILL });
    await collect({ [Symbol.asyncIterator]: () => it });

    const plain = process.start(sh("echo up; sleep 30"))[Symbol.asyncIterator]();
    const { pid: p2 } = await readUntil(plain, (t) => t.includes("up"));
    expect(await code(process.update({ process: pidSel(p2), pty: { size: { cols: 10, rows: 10 } } }))).toBe(Code.Internal);
    expect(await code(process.sendInput({ process: pidSel(p2), input: { input: { case: "pty", value: enc.encode("x") } } }))).toBe(Code.Internal);
    await process.sendSignal({ process: pidSel(p2), signal: Signal.SIGKILL });
    await collect({ [Symbol.asyncIterator]: () => plain });
  });
});

describe("connect", () => {
  it("re-attaches by pid and by tag: start, new output only, end", async () => {
    const { process } = clients(envd.url);
    const started = process.start({
      process: { cmd: "/bin/sh", args: ["-c", "echo before; read line; echo \"got $line\""] },
      tag: "reattach-me",
      stdin: true,
    })[Symbol.asyncIterator]();
    const { pid } = await readUntil(started, (t) => t.includes("before"));
    const list = await process.list({});
    const info = list.processes.find((p) => p.pid === pid);
    expect(info?.tag).toBe("reattach-me");
    expect(info?.config?.cmd).toBe("/bin/sh");
    expect(info?.config?.args).toEqual(["-c", 'echo before; read line; echo "got $line"']);

    const byPid = collect(process.connect({ process: pidSel(pid) }));
    const byTag = collect(process.connect({ process: { selector: { case: "tag", value: "reattach-me" } } }));
    await sleep(200); // let both subscriptions register before the output
    await process.sendInput({ process: pidSel(pid), input: { input: { case: "stdin", value: enc.encode("x\n") } } });
    for (const r of [await byPid, await byTag]) {
      expect(r.pid).toBe(pid);
      expect(r.stdout).toBe("got x\n"); // no replay of "before"
      expect(r.end?.exitCode).toBe(0);
    }
    const original = await collect({ [Symbol.asyncIterator]: () => started });
    expect(original.stdout).toBe("got x\n");

    // Ended recently: start + the retained end.
    const late = await collect(process.connect({ process: pidSel(pid) }));
    expect(late.events).toEqual(["start", "end"]);
    expect(late.end?.exitCode).toBe(0);
    expect(await running(pid)).toBe(false);
  });

  it("answers not_found in the end-stream for an unknown process", async () => {
    const { process } = clients(envd.url);
    const err = await collect(process.connect({ process: pidSel(999999) })).then(() => undefined, (e) => ConnectError.from(e));
    expect(err?.code).toBe(Code.NotFound);
    expect(err?.rawMessage).toBe("process with pid 999999 not found");
  });

  it("delivers every byte to several subscribers at once", async () => {
    const { process } = clients(envd.url);
    const expected = createHash("sha256");
    for (let i = 1; i <= 200000; i++) expected.update(`${i}\n`);
    const digest = expected.digest("hex");
    const fan = process.start({ process: { cmd: "/bin/sh", args: ["-c", "read go; seq 1 200000"] }, stdin: true });
    const fit = fan[Symbol.asyncIterator]();
    const fpid = ((await fit.next()).value!.event!.event.value as { pid: number }).pid;
    const watchers = [collect(process.connect({ process: pidSel(fpid) })), collect(process.connect({ process: pidSel(fpid) }))];
    await sleep(200);
    await process.sendInput({ process: pidSel(fpid), input: { input: { case: "stdin", value: enc.encode("go\n") } } });
    const results = [await collect({ [Symbol.asyncIterator]: () => fit }), ...(await Promise.all(watchers))];
    for (const r of results) {
      expect(createHash("sha256").update(r.stdout).digest("hex")).toBe(digest);
      expect(r.end?.exitCode).toBe(0);
    }
  });
});

describe("lifetime, keepalive, back-pressure", () => {
  it("Connect-Timeout-Ms is the process lifetime: the stream ends deadline_exceeded and the process dies", async () => {
    const { process } = clients(envd.url);
    const it = process.start(sh("echo up; exec sleep 100"), { timeoutMs: 1500 })[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("up"));
    const err = await collect({ [Symbol.asyncIterator]: () => it }).then(() => undefined, (e) => ConnectError.from(e));
    expect(err?.code).toBe(Code.DeadlineExceeded);
    for (let i = 0; i < 50 && (await running(pid)); i++) await sleep(100);
    expect(await running(pid)).toBe(false);
    const end = await collect(process.connect({ process: pidSel(pid) }));
    expect(end.end).toMatchObject({ exitCode: -1, status: "signal: killed" });
  });

  it("sends keepalive events at the requested interval while idle", async () => {
    const { process } = clients(envd.url);
    const r = await collect(process.start(sh("sleep 2.5; echo done"), { headers: { "keepalive-ping-interval": "1" } }));
    expect(r.events.filter((e) => e === "keepalive").length).toBeGreaterThanOrEqual(1);
    expect(r.events[0]).toBe("start");
    expect(r.events.at(-1)).toBe("end");
    expect(r.stdout).toBe("done\n");
  });

  it("a client that disconnects does not kill the process", async () => {
    const { process } = clients(envd.url);
    const abort = new AbortController();
    const it = process.start(sh("echo up; exec sleep 100"), { signal: abort.signal })[Symbol.asyncIterator]();
    const { pid } = await readUntil(it, (t) => t.includes("up"));
    abort.abort();
    await it.next().catch(() => undefined);
    await sleep(300);
    expect(await running(pid)).toBe(true);
    await process.sendSignal({ process: pidSel(pid), signal: Signal.SIGKILL });
  });

  it("a slow reader back-pressures the process instead of buffering its output", async () => {
    const { process } = clients(envd.url);
    // 256 MiB would pass through in well under a second without back-pressure.
    const it = process.start(sh("head -c 268435456 /dev/zero; echo; echo finished >&2"))[Symbol.asyncIterator]();
    const first = await it.next();
    const pid = (first.value!.event!.event.value as { pid: number }).pid;
    await it.next(); // one data event, then stop reading
    await sleep(1500);
    expect(await running(pid)).toBe(true);
    const rss = globalThis.process.memoryUsage().rss;
    let bytes = 0;
    let stderr = "";
    for (;;) {
      const r = await it.next();
      if (r.done) break;
      const e = r.value.event?.event;
      if (e?.case === "data" && e.value.output.case === "stdout") bytes += e.value.output.value.length;
      if (e?.case === "data" && e.value.output.case === "stderr") stderr += new TextDecoder().decode(e.value.output.value);
    }
    expect(bytes).toBeGreaterThan(268435456 - 1024 * 1024); // everything after the first event arrived
    expect(stderr).toBe("finished\n");
    expect(rss).toBeGreaterThan(0);
  });
});
