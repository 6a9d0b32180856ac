// The real `@e2b/code-interpreter` JS SDK against locale2b's Code Interpreter
// server, as its README uses it. No control plane: the SDK's debug mode
// (`Sandbox.create({ debug: true, sandboxUrl })`) makes no API call and sends
// runCode and the context calls to `sandboxUrl`, which is the server itself.
// Through a real sandbox (the control plane's proxy to port 49999) this is the
// same server once the code-interpreter-v1 template exists.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { NotFoundError, Sandbox, SandboxError, TimeoutError, type OutputMessage, type Result } from "@e2b/code-interpreter";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { codeInterpreterPython, startCodeInterpreter, type CiServer } from "./server.js";

const venv = codeInterpreterPython();
const skip = "skip" in venv ? venv.skip : undefined;

let server: CiServer;
let sbx: Sandbox;

beforeAll(async () => {
  if (!("python" in venv)) return;
  server = await startCodeInterpreter(venv.python);
  sbx = await Sandbox.create({ debug: true, sandboxUrl: server.url });
}, 180_000);
afterAll(async () => {
  await server?.stop();
});

describe.skipIf(skip !== undefined)(`@e2b/code-interpreter (JS) against our server${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("runCode('1+1') gives an Execution whose text is '2'", async () => {
    const ex = await sbx.runCode("1+1");
    expect(ex.text).toBe("2");
    expect(ex.results).toHaveLength(1);
    expect(ex.results[0]!.isMainResult).toBe(true);
    expect(ex.error).toBeUndefined();
    expect(ex.executionCount).toBeGreaterThan(0);
    expect(ex.toJSON()).toEqual({ results: [expect.objectContaining({ text: "2" })], logs: { stdout: [], stderr: [] }, error: undefined });
  });

  it("print goes to logs.stdout and onStdout; stderr to logs.stderr and onStderr", async () => {
    const out: OutputMessage[] = [];
    const err: OutputMessage[] = [];
    const ex = await sbx.runCode("import sys\nprint('hello')\nprint('oops', file=sys.stderr)", { onStdout: (m) => void out.push(m), onStderr: (m) => void err.push(m) });
    expect(ex.logs).toEqual({ stdout: ["hello\n"], stderr: ["oops\n"] });
    expect(out.map((m) => [m.line, m.error])).toEqual([["hello\n", false]]);
    expect(err.map((m) => [m.line, m.error])).toEqual([["oops\n", true]]);
  });

  it("an exception is an ExecutionError with name, value and traceback (and onError)", async () => {
    const seen: string[] = [];
    const ex = await sbx.runCode("raise KeyError('missing')", { onError: (e) => void seen.push(e.name) });
    expect(ex.error).toMatchObject({ name: "KeyError", value: "'missing'" });
    expect(ex.error!.traceback).toContain("KeyError");
    expect(seen).toEqual(["KeyError"]);
    expect(ex.text).toBeUndefined();
  });

  it("a matplotlib plot is a PNG result with chart data; onResult sees it", async () => {
    const results: Result[] = [];
    const ex = await sbx.runCode(
      "import matplotlib.pyplot as plt\nplt.plot([0, 1, 2], [0, 1, 4], label='squares')\nplt.title('Squares')\nplt.show()",
      { onResult: (r) => void results.push(r) },
    );
    expect(ex.results).toHaveLength(1);
    const r = ex.results[0]!;
    expect(r.isMainResult).toBe(false);
    expect(r.formats()).toContain("png");
    expect(Buffer.from(r.png!, "base64").subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
    expect(r.chart).toMatchObject({ type: "line", title: "Squares", elements: [{ label: "squares", points: [[0, 0], [1, 1], [2, 4]] }] });
    expect(results).toHaveLength(1);
  });

  it("a MIME type without a field of its own is in Result.extra and formats()", async () => {
    const ex = await sbx.runCode("display({'text/plain': 'custom', 'application/x-thing': {'k': 1}}, raw=True)");
    const r = ex.results[0]!;
    expect(r.text).toBe("custom");
    expect(r.extra).toEqual({ "application/x-thing": { k: 1 } });
    expect(r.formats()).toContain("application/x-thing");
  });

  it("a DataFrame is an HTML result", async () => {
    const ex = await sbx.runCode("import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'n': [1, 2]})");
    expect(ex.results[0]!.formats()).toContain("html");
    expect(ex.results[0]!.html).toMatch(/<table[\s\S]*Oslo[\s\S]*Lima/);
    expect(ex.text).toContain("Oslo");
  });

  it("a context keeps its state; another context and the default one do not see it", async () => {
    const ctx = await sbx.createCodeContext({ language: "python", cwd: server.cwd });
    expect(ctx).toMatchObject({ id: expect.any(String), language: "python", cwd: server.cwd });
    await sbx.runCode("mine = 'ctx-only'", { context: ctx });
    expect((await sbx.runCode("mine", { context: ctx })).text).toBe("'ctx-only'");
    expect((await sbx.runCode("mine")).error?.name).toBe("NameError");
    const other = await sbx.createCodeContext();
    expect((await sbx.runCode("mine", { context: other })).error?.name).toBe("NameError");
    const ids = (await sbx.listCodeContexts()).map((c) => c.id);
    expect(ids).toEqual(expect.arrayContaining([ctx.id, other.id]));
    await sbx.removeCodeContext(other.id);
    expect((await sbx.listCodeContexts()).map((c) => c.id)).not.toContain(other.id);
    await expect(sbx.runCode("1", { context: other })).rejects.toThrow(NotFoundError);
  });

  it("restartCodeContext forgets the context's state", async () => {
    const ctx = await sbx.createCodeContext();
    await sbx.runCode("before = 1", { context: ctx });
    await sbx.restartCodeContext(ctx);
    expect((await sbx.runCode("before", { context: ctx })).error?.name).toBe("NameError");
    expect((await sbx.runCode("1 + 1", { context: ctx })).text).toBe("2");
  });

  it("language: 'js' runs JavaScript (its own default context)", async () => {
    const ex = await sbx.runCode("const xs = [1, 2, 3]; console.log('sum'); xs.reduce((a, b) => a + b)", { language: "js" });
    expect(ex.text).toBe("6");
    expect(ex.logs.stdout).toEqual(["sum\n"]);
    expect((await sbx.runCode("xs.length", { language: "javascript" })).text).toBe("3");
    const ctx = await sbx.createCodeContext({ language: "javascript" });
    expect((await sbx.runCode("typeof xs", { context: ctx })).text).toBe("'undefined'");
  });

  it("envs hold for that runCode only", async () => {
    const ex = await sbx.runCode("import os; os.environ['GREETING']", { envs: { GREETING: "hi there" } });
    expect(ex.text).toBe("'hi there'");
    expect((await sbx.runCode("import os; os.environ.get('GREETING', 'unset')")).text).toBe("'unset'");
  });

  it("a long loop streams: each line arrives before the code goes on (the test opens the gate only after seeing it)", async () => {
    const gates = [0, 1, 2].map((i) => join(server.cwd, `js-sdk-gate-${i}`));
    const code = [
      "import os, time",
      `gates = ${JSON.stringify(gates)}`,
      "for i, g in enumerate(gates):",
      "    print(f'step {i}', flush=True)",
      "    for _ in range(1500):",
      "        if os.path.exists(g):",
      "            break",
      "        time.sleep(0.02)",
      "    else:",
      "        raise AssertionError('the client never saw the line')",
      "'done'",
    ].join("\n");
    const events: string[] = [];
    const ex = await sbx.runCode(code, {
      onStdout: (m) => {
        events.push(m.line);
        const step = /^step (\d)/.exec(m.line);
        if (step) writeFileSync(gates[Number(step[1])]!, "");
      },
      onResult: (r) => void events.push(`result ${r.text}`),
    });
    expect(ex.error).toBeUndefined();
    expect(events).toEqual(["step 0\n", "step 1\n", "step 2\n", "result 'done'"]);
  });

  it("timeoutMs ends runCode with a TimeoutError and interrupts the code: the context runs the next code at once, state kept", async () => {
    const ctx = await sbx.createCodeContext();
    await sbx.runCode("kept = 'yes'", { context: ctx });
    await expect(sbx.runCode("import time\ntime.sleep(3600)", { context: ctx, timeoutMs: 1_000 })).rejects.toThrow(TimeoutError);
    expect((await sbx.runCode("kept", { context: ctx })).text).toBe("'yes'");
  });

  it("a language without a kernel is a NotFoundError naming the languages here; a bad cwd a SandboxError", async () => {
    await expect(sbx.runCode("1", { language: "r" })).rejects.toThrow(/no kernel for language 'r'.*python/);
    await expect(sbx.runCode("1", { language: "r" })).rejects.toThrow(NotFoundError);
    await expect(sbx.createCodeContext({ cwd: "/does/not/exist" })).rejects.toThrow(SandboxError);
  });
});
