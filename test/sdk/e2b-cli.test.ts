// E2B's own CLI (npm `@e2b/cli`) against a real control plane, with only the
// API key and URL in its environment: `e2b template create` (a Dockerfile,
// built through the template API), `template list`, `publish`, `delete`, and
// `sandbox list` / `kill`. Needs root (the build runs in a real sandbox).
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;
const CLI = join(import.meta.dirname, "..", "..", "node_modules", ".bin", "e2b");

let cp: TestControlPlane;
let restoreEnv = () => {};
let dir = "";

beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  dir = mkdtempSync(join(tmpdir(), "locale2b-e2bcli-"));
}, 120_000);

afterAll(async () => {
  restoreEnv();
  await cp?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Runs the CLI in `dir` with the SDK's three variables and a HOME of its own (no login config). */
function e2b(...args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(CLI, args, { cwd: dir, env: { PATH: process.env.PATH, HOME: dir, ...cp.sdkEnv, NO_COLOR: "1", CI: "1" } });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("close", (code) => resolve({ code: code ?? -1, out }));
  });
}

describe.skipIf(skip !== undefined)(`E2B's CLI${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 300_000 }, () => {
  it("template create (a Dockerfile), list, publish, delete; sandbox list and kill", async () => {
    const name = `cli-${process.pid}`;
    writeFileSync(join(dir, "e2b.Dockerfile"), `FROM e2bdev/base\nRUN echo built-by-the-cli-${process.pid} > /home/user/cli.txt\n`);
    const created = await e2b("template", "create", name, "-d", "e2b.Dockerfile");
    expect(created.code, created.out).toBe(0);
    const list = await e2b("template", "list");
    expect(list.out).toMatch(new RegExp(`Private\\s+\\w{20}\\s+${name}\\s`));
    expect(list.out).toMatch(/Public\s+base\s+base\s/);
    expect((await e2b("template", "publish", name, "-y")).out).toMatch(`Published as: ${name}`);
    expect((await e2b("template", "list")).out).toMatch(new RegExp(`Public\\s+\\w{20}\\s+${name}\\s`));

    const sbx = await Sandbox.create(name, { timeoutMs: 300_000 });
    expect((await sbx.commands.run("cat /home/user/cli.txt")).stdout).toBe(`built-by-the-cli-${process.pid}\n`);
    expect((await e2b("sandbox", "list")).out).toContain(sbx.sandboxId);
    // In use: the delete is refused and says why.
    expect((await e2b("template", "delete", name, "-y")).out).toMatch(/still used by 1 sandbox/);
    const killed = await e2b("sandbox", "kill", sbx.sandboxId);
    expect(killed.code, killed.out).toBe(0);
    expect((await e2b("sandbox", "list")).out).not.toContain(sbx.sandboxId);
    expect((await e2b("template", "delete", name, "-y")).code).toBe(0);
    expect((await e2b("template", "list")).out).not.toContain(name);
  });
});
