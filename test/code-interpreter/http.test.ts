// locale2b's Code Interpreter server over raw HTTP: each endpoint, its errors,
// the JSON lines of POST /execute, queueing, parallel contexts, interrupts and
// a kernel that dies. The real SDKs' view of the same server: sdk-js.test.ts
// and test/python/test_code_interpreter.py.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { lines, text, type Line } from "./lines.js";
import { alive, codeInterpreterPython, procState, startCodeInterpreter, type CiServer } from "./server.js";

const venv = codeInterpreterPython();
const skip = "skip" in venv ? venv.skip : undefined;

let server: CiServer;
let n = 0;

beforeAll(async () => {
  if ("python" in venv) server = await startCodeInterpreter(venv.python);
}, 180_000);
afterAll(async () => {
  await server?.stop();
});

function post(path: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  return fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    ...init,
  });
}

/** The lines of one execution, read to the end. */
async function execute(body: Record<string, unknown>): Promise<Line[]> {
  const res = await post("/execute", body);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.text())
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Line);
}

const main = (ls: Line[]) => ls.find((l) => l.type === "result" && l.is_main_result);
const errorOf = (ls: Line[]) => ls.find((l) => l.type === "error");

async function createContext(body: Record<string, unknown> = {}): Promise<{ id: string; language: string; cwd: string }> {
  const res = await post("/contexts", body);
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as { id: string; language: string; cwd: string };
}

/** A path the test creates to let waiting code go on (code that waits polls for it, 1500 looks at most). */
function gate(): string {
  return join(server.cwd, `gate-${n++}`);
}
const waitFor = (path: string) =>
  `import os, time\nfor _ in range(1500):\n    if os.path.exists(${JSON.stringify(path)}):\n        break\n    time.sleep(0.02)\nelse:\n    raise AssertionError("gate never opened")\n`;

describe.skipIf(skip !== undefined)(`Code Interpreter server: endpoints${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("GET /health is ok once the default contexts run", async () => {
    const res = await fetch(`${server.url}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("GET /contexts lists the default Python and JavaScript contexts, in the default cwd", async () => {
    const res = await fetch(`${server.url}/contexts`);
    expect(res.status).toBe(200);
    const list = (await res.json()) as { id: string; language: string; cwd: string }[];
    expect(list.map((c) => c.language)).toEqual(expect.arrayContaining(["python", "javascript"]));
    for (const c of list) {
      expect(c.id).toMatch(/^[0-9a-f-]{36}$/);
      expect(c.cwd).toBe(server.cwd);
    }
  });

  it("POST /execute streams JSON lines: a main result, the execution count, then the end", async () => {
    const res = await post("/execute", { code: "1+1" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/x-ndjson");
    const ls = (await res.text()).trim().split("\n").map((l) => JSON.parse(l) as Line);
    expect(ls).toEqual([
      { type: "result", is_main_result: true, text: "2" },
      { type: "number_of_executions", execution_count: expect.any(Number) },
      { type: "end_of_execution" },
    ]);
  });

  it("stdout and stderr lines carry the text and a timestamp in ns", async () => {
    const ls = await execute({ code: "import sys\nprint('out')\nprint('err', file=sys.stderr)" });
    expect(text(ls, "stdout")).toBe("out\n");
    expect(text(ls, "stderr")).toBe("err\n");
    const t = ls.find((l) => l.type === "stdout")!.timestamp as number;
    expect(Number.isInteger(t)).toBe(true);
    expect(Math.abs(t / 1e6 - Date.now())).toBeLessThan(3_600_000);
    expect(main(ls)).toBeUndefined();
  });

  it("an exception is an error line with name, value and the traceback as one string", async () => {
    const ls = await execute({ code: "def f():\n    raise ValueError('boom')\nf()" });
    const err = errorOf(ls)!;
    expect(err.name).toBe("ValueError");
    expect(err.value).toBe("boom");
    expect(typeof err.traceback).toBe("string");
    expect(err.traceback).toContain("ValueError");
    expect(err.traceback).toContain("f()");
    expect(ls.at(-1)).toEqual({ type: "end_of_execution" });
  });

  it("display data are results that are not the main one, each format in its field; unknown MIME types go to extra", async () => {
    const code = [
      "from IPython.display import display, HTML, Markdown, SVG, JSON, Latex, Javascript",
      "display(HTML('<b>h</b>'))",
      "display(Markdown('*m*'))",
      "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"/>'))",
      "display(JSON({'a': 1}))",
      "display(Latex('$x$'))",
      "display(Javascript('1'))",
      "display({'text/plain': 'custom', 'application/x-thing': 'v'}, raw=True)",
      "'last'",
    ].join("\n");
    const results = (await execute({ code })).filter((l) => l.type === "result");
    expect(results.map((r) => r.is_main_result)).toEqual([false, false, false, false, false, false, false, true]);
    expect(results[0]!.html).toBe("<b>h</b>");
    expect(results[1]!.markdown).toBe("*m*");
    expect(results[2]!.svg).toContain("<svg");
    expect(results[3]!.json).toEqual({ a: 1 });
    expect(results[4]!.latex).toBe("$x$");
    expect(results[5]!.javascript).toBe("1");
    expect(results[6]).toMatchObject({ text: "custom", extra: { "application/x-thing": "v" }, "application/x-thing": "v" });
    expect(results[7]).toMatchObject({ text: "'last'", is_main_result: true });
  });

  it("a DataFrame is an HTML result; a matplotlib figure a PNG with its chart data", async () => {
    const df = main(await execute({ code: "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})" }))!;
    expect(df.html).toContain("<table");
    expect(df.text).toContain("a");
    const ls = await execute({
      code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6], label='s')\nplt.title('T')\nplt.xlabel('x')\nplt.show()",
    });
    const fig = ls.find((l) => l.type === "result")!;
    expect(Buffer.from(fig.png as string, "base64").subarray(1, 4).toString()).toBe("PNG");
    expect(fig.chart).toMatchObject({ type: "line", title: "T", x_label: "x", elements: [{ label: "s", points: [[1, 4], [2, 5], [3, 6]] }] });
    const bar = (await execute({ code: "plt.bar(['a', 'b'], [3, 4])\nplt.show()" })).find((l) => l.type === "result")!;
    expect(bar.chart).toMatchObject({ type: "bar", elements: [{ label: "a", value: "3" }, { label: "b", value: "4" }] });
  });

  it("number_of_executions counts the context's executions", async () => {
    const ctx = await createContext();
    const count = async () => (await execute({ code: "0", context_id: ctx.id })).find((l) => l.type === "number_of_executions")!.execution_count;
    expect(await count()).toBe(1);
    expect(await count()).toBe(2);
  });
});

describe.skipIf(skip !== undefined)(`Code Interpreter server: bad requests${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const cases: [string, string, unknown, number, RegExp][] = [
    ["/execute", "a body that is not JSON", "{code:", 400, /not valid JSON/],
    ["/execute", "a JSON array", "[1]", 400, /must be a JSON object/],
    ["/execute", "no code", {}, 400, /code is required/],
    ["/execute", "code that is not a string", { code: 1 }, 400, /code is required/],
    ["/execute", "an unknown context", { code: "1", context_id: "nope" }, 404, /context 'nope' not found/],
    ["/execute", "a context id that is not a string", { code: "1", context_id: 5 }, 400, /context_id must be a string/],
    ["/execute", "a language without a kernel here", { code: "1", language: "r" }, 404, /no kernel for language 'r'.*python.*javascript.*bash/],
    ["/execute", "typescript", { code: "1", language: "typescript" }, 404, /no kernel for language 'typescript'/],
    ["/execute", "a language that is not a string", { code: "1", language: 3 }, 400, /language must be a string/],
    ["/execute", "env_vars that are not an object", { code: "1", env_vars: ["A"] }, 400, /env_vars must be an object/],
    ["/execute", "an env var name with a space", { code: "1", env_vars: { "A B": "1" } }, 400, /not a valid environment variable name/],
    ["/execute", "an env var value that is not a string", { code: "1", env_vars: { A: 1 } }, 400, /value of A must be a string/],
    ["/contexts", "an unknown language", { language: "cobol" }, 404, /no kernel for language 'cobol'/],
    ["/contexts", "a relative cwd", { cwd: "work" }, 400, /must be an absolute path/],
    ["/contexts", "a cwd that does not exist", { cwd: "/nonexistent/dir" }, 400, /is not a directory/],
    ["/contexts", "a cwd that is not a string", { cwd: 7 }, 400, /cwd must be a path/],
  ];
  it.each(cases)("POST %s with %s: an error status and a message", async (path, _what, body, status, message) => {
    const res = await post(path, body);
    expect(res.status).toBe(status);
    expect(await res.text()).toMatch(message);
  });

  it("a context with a language given that is not its own is refused", async () => {
    const list = (await (await fetch(`${server.url}/contexts`)).json()) as { id: string; language: string }[];
    const py = list.find((c) => c.language === "python")!;
    const res = await post("/execute", { code: "1", context_id: py.id, language: "javascript" });
    expect(res.status).toBe(400);
    expect(await res.text()).toMatch(/runs python, not javascript/);
  });

  it("DELETE and restart of an unknown context are 404; an unknown path 404; a wrong method 405", async () => {
    expect((await fetch(`${server.url}/contexts/nope`, { method: "DELETE" })).status).toBe(404);
    expect((await post("/contexts/nope/restart", "")).status).toBe(404);
    expect((await fetch(`${server.url}/nothing`)).status).toBe(404);
    expect((await fetch(`${server.url}/execute`)).status).toBe(405);
  });

  it("a body over 16 MiB is refused with 413 and the server stays healthy", async () => {
    const res = await post("/execute", { code: `x = '${"a".repeat(17 * 1024 * 1024)}'` });
    expect(res.status).toBe(413);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });
});

describe.skipIf(skip !== undefined)(`Code Interpreter server: contexts${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("contexts keep their own state and cwd, and do not see each other's", async () => {
    const sub = join(server.cwd, "sub");
    mkdirSync(sub, { recursive: true });
    const a = await createContext({ language: "python", cwd: sub });
    const b = await createContext({});
    expect(a).toMatchObject({ language: "python", cwd: sub });
    expect(b).toMatchObject({ language: "python", cwd: server.cwd });
    await execute({ code: "secret = 41", context_id: a.id });
    expect(main(await execute({ code: "secret + 1", context_id: a.id }))!.text).toBe("42");
    expect(errorOf(await execute({ code: "secret", context_id: b.id }))!.name).toBe("NameError");
    expect(errorOf(await execute({ code: "secret" }))!.name).toBe("NameError");
    expect(main(await execute({ code: "import os; os.getcwd()", context_id: a.id }))!.text).toBe(`'${sub}'`);
  });

  it("POST /contexts/{id}/restart starts a fresh kernel: the state is gone, the context stays", async () => {
    const ctx = await createContext({ language: "python" });
    await execute({ code: "kept = 1", context_id: ctx.id });
    const pid = Number(main(await execute({ code: "import os; os.getpid()", context_id: ctx.id }))!.text);
    const res = await post(`/contexts/${ctx.id}/restart`, "");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual(ctx);
    expect(errorOf(await execute({ code: "kept", context_id: ctx.id }))!.name).toBe("NameError");
    expect(main(await execute({ code: "import os; os.getpid()", context_id: ctx.id }))!.text).not.toBe(String(pid));
    expect(alive(pid)).toBe(false);
  });

  it("DELETE /contexts/{id} stops its kernel (and the kernel's Node) and forgets it", async () => {
    const ctx = await createContext({ language: "javascript" });
    const pids = JSON.parse(main(await execute({ code: "JSON.stringify([process.pid, process.ppid])", context_id: ctx.id }))!.text!.toString().slice(1, -1)) as number[];
    expect(pids.filter(alive)).toEqual(pids);
    const res = await fetch(`${server.url}/contexts/${ctx.id}`, { method: "DELETE" });
    expect(res.status).toBe(204);
    await expect.poll(() => pids.filter(alive).map((p) => `${p}: ${procState(p)}`), { timeout: 10_000 }).toEqual([]);
    const list = (await (await fetch(`${server.url}/contexts`)).json()) as { id: string }[];
    expect(list.map((c) => c.id)).not.toContain(ctx.id);
    expect((await post("/execute", { code: "1", context_id: ctx.id })).status).toBe(404);
  });

  it("JavaScript: results, console output, state across cells, top-level await, errors", async () => {
    const ctx = await createContext({ language: "js" });
    expect(ctx.language).toBe("javascript");
    const run = (code: string) => execute({ code, context_id: ctx.id });
    expect(main(await run("const a = 21; a * 2"))!.text).toBe("42");
    expect(main(await run("a + 1"))!.text).toBe("22");
    expect(main(await run("await new Promise((r) => setTimeout(() => r('later'), 10))"))!.text).toBe("'later'");
    expect(main(await run("({ x: [1, 2] })"))!.text).toBe("{ x: [ 1, 2 ] }");
    const logged = await run("console.log('hello'); console.error('oops')");
    expect(text(logged, "stdout")).toBe("hello\n");
    expect(text(logged, "stderr")).toBe("oops\n");
    const err = errorOf(await run("null.x"))!;
    expect(err.name).toBe("TypeError");
    expect(err.value).toMatch(/Cannot read properties of null/);
    expect(errorOf(await run("let let = 1"))!.name).toBe("SyntaxError");
    expect(main(await run("require('node:path').join('a', 'b')"))!.text).toBe("'a/b'");
    expect(main(await run("process.cwd()"))!.text).toBe(`'${server.cwd}'`);
  });

  it("JavaScript: import statements and import() work, from builtins and from packages in the context's cwd", async () => {
    const pkg = join(server.cwd, "node_modules", "l2b-esm");
    mkdirSync(pkg, { recursive: true });
    writeFileSync(join(pkg, "package.json"), JSON.stringify({ name: "l2b-esm", type: "module", main: "index.js" }));
    writeFileSync(join(pkg, "index.js"), "export const answer = 42;\nexport default 'dflt';\n");
    const ctx = await createContext({ language: "javascript" });
    const run = async (code: string) => {
      const ls = await execute({ code, context_id: ctx.id });
      expect(errorOf(ls)).toBeUndefined();
      return main(ls)!.text;
    };
    expect(await run('import os from "node:os";\nos.platform()')).toBe("'linux'");
    expect(await run("import { join, basename as base } from 'node:path'\n[join('a', 'b'), base('/x/y')]")).toBe("[ 'a/b', 'y' ]");
    expect(await run('import dflt, { answer } from "l2b-esm"\n[dflt, answer]')).toBe("[ 'dflt', 42 ]");
    expect(await run('import * as esm from "l2b-esm"\nesm.answer + 1')).toBe("43");
    expect(await run('(await import("l2b-esm")).answer')).toBe("42");
    // Imported once, the binding stays, and importing again is allowed.
    expect(await run("answer")).toBe("42");
    expect(await run('import { answer } from "l2b-esm"; answer * 2')).toBe("84");
  });

  it("JavaScript: process.exit() ends the Node process; the error says the state is lost and the next cell runs", async () => {
    const ctx = await createContext({ language: "javascript" });
    await execute({ code: "globalThis.before = 1", context_id: ctx.id });
    const err = errorOf(await execute({ code: "process.exit(3)", context_id: ctx.id }))!;
    expect(err).toMatchObject({ name: "KernelRestarted", value: expect.stringMatching(/exited with code 3.*state is lost/) });
    expect(main(await execute({ code: "typeof before", context_id: ctx.id }))!.text).toBe("'undefined'");
  });

  it("bash: output, state across cells, a failing command is an error", async () => {
    const ls = await execute({ code: "X=5; echo hi", language: "bash" });
    expect(text(ls, "stdout")).toBe("hi\n");
    expect(text(await execute({ code: "echo $X", language: "bash" }), "stdout")).toBe("5\n");
    const err = errorOf(await execute({ code: "false", language: "bash" }))!;
    expect(err.value).toBe("1");
  });

  it("env_vars hold for one execution and are put back after it, in Python, JavaScript and bash", async () => {
    const py = await createContext({ language: "python" });
    await execute({ code: "import os; os.environ['L2B_KEEP'] = 'orig'", context_id: py.id });
    const envs = { L2B_KEEP: "during", L2B_NEW: "it's \"quoted\"\nand multi-line ✓" };
    const read = "import os, json; print(json.dumps([os.environ.get('L2B_KEEP'), os.environ.get('L2B_NEW')]))";
    const json = (ls: Line[]) => JSON.parse(text(ls, "stdout")) as unknown;
    expect(json(await execute({ code: read, context_id: py.id, env_vars: envs }))).toEqual(["during", envs.L2B_NEW]);
    expect(json(await execute({ code: read, context_id: py.id }))).toEqual(["orig", null]);

    const js = await createContext({ language: "javascript" });
    const readJs = "console.log(JSON.stringify([process.env.L2B_NEW ?? null]))";
    expect(JSON.parse(text(await execute({ code: readJs, context_id: js.id, env_vars: envs }), "stdout"))).toEqual([envs.L2B_NEW]);
    expect(JSON.parse(text(await execute({ code: readJs, context_id: js.id }), "stdout"))).toEqual([null]);

    const out = await execute({ code: 'printf "%s|%s" "$L2B_KEEP" "$L2B_NEW"', language: "bash", env_vars: envs });
    // bash_kernel ends output that has no newline with one.
    expect(text(out, "stdout").replace(/\r/g, "").trimEnd()).toBe(`during|${envs.L2B_NEW}`);
    expect(text(await execute({ code: 'echo "[${L2B_NEW-unset}]"', language: "bash" }), "stdout")).toBe("[unset]\n");
  });
});

describe.skipIf(skip !== undefined)(`Code Interpreter server: streaming, queueing, interrupts${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("output streams while the code runs: the code waits for a file the test makes only after reading the first line", async () => {
    const g = gate();
    const res = await post("/execute", { code: `print('first', flush=True)\n${waitFor(g)}print('second')` });
    const seen: string[] = [];
    for await (const line of lines(res)) {
      seen.push(line.type === "stdout" ? `stdout:${line.text}` : line.type);
      if (line.type === "stdout" && line.text === "first\n") writeFileSync(g, "");
    }
    expect(seen).toEqual(["stdout:first\n", "stdout:second\n", "number_of_executions", "end_of_execution"]);
  });

  it("executions on one context run one at a time, in the order they came", async () => {
    const ctx = await createContext();
    await execute({ code: "order = []", context_id: ctx.id });
    const g = gate();
    const first = post("/execute", { code: `order.append('first started')\n${waitFor(g)}order.append('first done')`, context_id: ctx.id });
    // The second is sent while the first waits; its headers come at once (it is queued).
    const second = await post("/execute", { code: "order.append('second'); order", context_id: ctx.id });
    writeFileSync(g, "");
    const [a, b] = await Promise.all([first.then((r) => r.text()), second.text()]);
    expect(a).toContain("end_of_execution");
    const result = b.split("\n").filter(Boolean).map((l) => JSON.parse(l) as Line);
    expect(main(result)!.text).toBe("['first started', 'first done', 'second']");
  });

  it("different contexts run at the same time: one waits for a file only the other creates", async () => {
    const [a, b] = [await createContext(), await createContext()];
    const g = gate();
    const waiting = execute({ code: `${waitFor(g)}'a saw it'`, context_id: a.id });
    const making = execute({ code: `open(${JSON.stringify(g)}, 'w').close()\n'b made it'`, context_id: b.id });
    const [wa, mb] = await Promise.all([waiting, making]);
    expect(main(mb)!.text).toBe("'b made it'");
    expect(errorOf(wa)).toBeUndefined();
    expect(main(wa)!.text).toBe("'a saw it'");
  });

  it("a client that goes away interrupts its code; the context keeps its state and takes the next execution", async () => {
    const ctx = await createContext();
    await execute({ code: "state = 'kept'", context_id: ctx.id });
    const abort = new AbortController();
    const res = await post("/execute", { code: "import time\nprint('started', flush=True)\ntime.sleep(3600)", context_id: ctx.id }, { signal: abort.signal });
    for await (const line of lines(res)) if (line.type === "stdout") break;
    abort.abort();
    // Only an interrupted sleep lets this run before the test's timeout.
    const after = await execute({ code: "state", context_id: ctx.id });
    expect(main(after)!.text).toBe("'kept'");
  });

  it("the same for JavaScript: a busy loop is stopped, the state stays", async () => {
    const ctx = await createContext({ language: "javascript" });
    await execute({ code: "let kept = 'yes'", context_id: ctx.id });
    const abort = new AbortController();
    const res = await post("/execute", { code: "console.log('spinning'); while (true) {}", context_id: ctx.id }, { signal: abort.signal });
    for await (const line of lines(res)) if (line.type === "stdout") break;
    abort.abort();
    expect(main(await execute({ code: "kept", context_id: ctx.id }))!.text).toBe("'yes'");
  });

  it("a kernel that dies mid-execution: an error line says so, and the context runs again with a fresh kernel", async () => {
    const ctx = await createContext();
    await execute({ code: "lost = 1", context_id: ctx.id });
    const ls = await execute({ code: "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", context_id: ctx.id });
    const err = errorOf(ls)!;
    expect(err.name).toBe("DeadKernelError");
    expect(err.value).toMatch(/killed by signal 9/);
    expect(ls.at(-1)).toEqual({ type: "end_of_execution" });
    expect(errorOf(await execute({ code: "lost", context_id: ctx.id }))!.name).toBe("NameError");
    expect(main(await execute({ code: "2 * 3", context_id: ctx.id }))!.text).toBe("6");
  });

  it("removing a context ends its running execution and the ones queued behind it, each with an error", async () => {
    const ctx = await createContext();
    const running = await post("/execute", { code: "import time\nprint('started', flush=True)\ntime.sleep(3600)", context_id: ctx.id });
    const seen: Line[] = [];
    const it = lines(running);
    seen.push((await it.next()).value as Line);
    const queued = await post("/execute", { code: "'never'", context_id: ctx.id });
    expect((await fetch(`${server.url}/contexts/${ctx.id}`, { method: "DELETE" })).status).toBe(204);
    for await (const line of it) seen.push(line);
    expect(errorOf(seen)).toMatchObject({ name: "ContextRestarted", value: "the context was removed while this code ran" });
    const q = (await queued.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l) as Line);
    expect(q).toEqual([{ type: "error", name: "ContextRestarted", value: "the context was removed before this code ran", traceback: "" }, { type: "end_of_execution" }]);
  });

  it("two restarts at once both succeed, one after the other, and the context runs code after them", async () => {
    const ctx = await createContext();
    const [a, b] = await Promise.all([post(`/contexts/${ctx.id}/restart`, ""), post(`/contexts/${ctx.id}/restart`, "")]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(main(await execute({ code: "1 + 1", context_id: ctx.id }))!.text).toBe("2");
  });

  it("restarting a context while its code runs ends that execution with an error", async () => {
    const ctx = await createContext();
    const res = await post("/execute", { code: "import time\nprint('started', flush=True)\ntime.sleep(3600)", context_id: ctx.id });
    const seen: Line[] = [];
    for await (const line of lines(res)) {
      seen.push(line);
      if (line.type === "stdout") expect((await post(`/contexts/${ctx.id}/restart`, "")).status).toBe(200);
    }
    expect(errorOf(seen)).toMatchObject({ name: "ContextRestarted" });
    expect(seen.at(-1)).toEqual({ type: "end_of_execution" });
  });
});
