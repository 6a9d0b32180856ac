// The real `@e2b/code-interpreter` JS SDK against a real control plane, as its
// README uses it: `Sandbox.create()` (the code-interpreter-v1 template, whose
// start command runs our server), then runCode through the proxy to port
// 49999. Needs root and the code-interpreter-v1 image (npm test builds it).
import { Sandbox, type Result } from "@e2b/code-interpreter";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findTemplateImage, imagesDir } from "../../control-plane/images/layout.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip =
  caps.mode !== "sandbox"
    ? "needs the control plane to run as root (sandbox mode)"
    : (caps.missing ?? (findTemplateImage("code-interpreter-v1", imagesDir()) ? undefined : `the code-interpreter-v1 template is not built in ${imagesDir()} (locale2b template build code-interpreter-v1)`));

let cp: TestControlPlane;
let restoreEnv = () => {};
let sbx: Sandbox;

beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  sbx = await Sandbox.create({ timeoutMs: 600_000, envs: { FROM_CREATE: "create-env" } });
}, 300_000);

afterAll(async () => {
  await sbx?.kill().catch(() => undefined);
  restoreEnv();
  await cp?.close();
});

describe.skipIf(skip !== undefined)(`@e2b/code-interpreter through a real sandbox${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 300_000 }, () => {
  it("the README's first example: runCode('x = 1') then runCode('x+=1; x') gives the text 2", async () => {
    await sbx.runCode("x = 1");
    const ex = await sbx.runCode("x+=1; x");
    expect(ex.text).toBe("2");
    expect((await sbx.runCode("1+1")).results[0]?.text).toBe("2");
  });

  it("prints go to stdout as they come; an exception is an ExecutionError with its name, value and traceback", async () => {
    const seen: string[] = [];
    const ex = await sbx.runCode("import time\nfor i in range(3):\n    print(f'line {i}', flush=True)\n    time.sleep(0.1)", { onStdout: (m) => void seen.push(m.line) });
    expect(seen).toEqual(["line 0\n", "line 1\n", "line 2\n"]);
    expect(ex.logs.stdout).toEqual(["line 0\n", "line 1\n", "line 2\n"]);
    const err = await sbx.runCode("1/0");
    expect(err.error?.name).toBe("ZeroDivisionError");
    expect(err.error?.value).toBe("division by zero");
    expect(err.error?.traceback).toMatch(/ZeroDivisionError/);
  });

  it("a matplotlib plot is a PNG result (with chart data) and a DataFrame an HTML one", async () => {
    const plot = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('t')\nplt.show()");
    const png = plot.results.find((r: Result) => r.png);
    expect(png?.png).toMatch(/^iVBORw0KGgo/);
    expect(png?.chart?.type).toBe("line");
    const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})");
    expect(df.results[0]?.html).toMatch(/<table/);
  });

  it("contexts keep their own state; restartCodeContext clears it; JavaScript runs too; envs reach the code", async () => {
    const ctx = await sbx.createCodeContext();
    await sbx.runCode("secret = 'only here'", { context: ctx });
    expect((await sbx.runCode("secret", { context: ctx })).text).toBe("'only here'");
    expect((await sbx.runCode("'secret' in globals()")).text).toBe("False");
    await sbx.restartCodeContext(ctx);
    expect((await sbx.runCode("secret", { context: ctx })).error?.name).toBe("NameError");
    expect((await sbx.runCode("const a = 20; a + 22", { language: "js" })).text).toBe("42");
    expect((await sbx.runCode("import os; os.environ['PER_RUN']", { envs: { PER_RUN: "run-env" } })).text).toBe("'run-env'");
    expect((await sbx.runCode("import os; os.environ.get('FROM_CREATE')")).text).toBe("'create-env'");
  });

  it("timeoutMs stops a long run; the sandbox's context answers after", async () => {
    await expect(sbx.runCode("import time\ntime.sleep(30)", { timeoutMs: 1000 })).rejects.toThrow(/timeout|timed out|aborted/i);
    expect((await sbx.runCode("2*21")).text).toBe("42");
  });
});
