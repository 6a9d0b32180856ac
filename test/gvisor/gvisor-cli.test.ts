// Choosing the gvisor runtime: `serve --runtime gvisor` (or LOCALE2B_RUNTIME)
// without runsc refuses to start and says what to install; `doctor` says
// runsc's version and platform; a template may ask for gvisor on a server
// whose default is the process runtime.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane } from "../helpers/control-plane.js";
import { runCli } from "../helpers/cli.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { testImagesDir } from "../helpers/vm.js";

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "locale2b-gvisor-cli-"));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe("gvisor runtime: choosing it", () => {
  it("serve --runtime gvisor without runsc refuses to start and says what to install", async () => {
    const run = await runCli(["serve", "--runtime", "gvisor", "--data-dir", tempDir()], { LOCALE2B_RUNSC: "/nonexistent/runsc", LOCALE2B_IMAGES_DIR: tempDir() });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("cannot start the 'gvisor' runtime");
    expect(run.stderr).toMatch(/runsc is not installed: install gVisor's runsc: run scripts\/setup-host/);
  });

  it("LOCALE2B_RUNTIME=gvisor picks it too", async () => {
    const run = await runCli(["serve", "--data-dir", tempDir()], { LOCALE2B_RUNTIME: "gvisor", LOCALE2B_RUNSC: "/nonexistent/runsc", LOCALE2B_IMAGES_DIR: tempDir() });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("cannot start the 'gvisor' runtime");
  });

  const missing = gvisorMissing();
  it.skipIf(missing !== undefined)(`doctor says runsc's version and platform${missing ? ` [skipped: ${missing}]` : ""}`, async () => {
    const run = await runCli(["doctor", "--json"], { LOCALE2B_IMAGES_DIR: testImagesDir() });
    const runsc = (JSON.parse(run.stdout) as { checks: { name: string; ok: boolean; detail: string }[] }).checks.find((c) => c.name === "runsc");
    expect(runsc?.ok).toBe(true);
    expect(runsc?.detail).toMatch(/^runsc \S+ \(.*runsc\), platform (systrap|ptrace|kvm)$/);
    const text = await runCli(["doctor"], { LOCALE2B_IMAGES_DIR: testImagesDir() });
    expect(text.stdout).toMatch(/gvisor runtime: runsc \S+ .*platform/);
  });

  it.skipIf(missing !== undefined)(
    `a process-runtime server runs a template that asks for gvisor in a runsc sandbox${missing ? ` [skipped: ${missing}]` : ""}`,
    { timeout: 300_000 },
    async () => {
      const cp = await startTestControlPlane({
        runtime: new ProcessRuntime(),
        createRuntime: async (name) => {
          if (name !== "gvisor") throw new Error(`unexpected runtime ${name}`);
          return gvisorRuntime();
        },
        templateRuntime: (id) => (id === "base" ? "gvisor" : undefined),
        imagesDir: testImagesDir(),
      });
      try {
        const res = await fetch(`${cp.url}/sandboxes`, {
          method: "POST",
          headers: { "X-API-Key": cp.apiKey, "content-type": "application/json" },
          body: JSON.stringify({ templateID: "base" }),
        });
        const body = (await res.json()) as Record<string, unknown>;
        expect(res.status, JSON.stringify(body)).toBe(201);
        const id = String(body.sandboxID);
        expect((await cp.store.getSandbox(id))!.runtime).toBe("gvisor");
        expect(cp.manager.runtimeName).toBe("process");
        await cp.manager.kill(id);
      } finally {
        await cp.close();
      }
    },
  );
});
