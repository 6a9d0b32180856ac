// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// Runs the Go client tests (test/go, connect-go over the generated gen/go
// code) against a real envd, through the control plane's envd proxy, and
// against the control plane's TemplateService (test/go/controlplane).
// The first run downloads modules through the Go module proxy, hence the
// long timeout.
import { execFile, spawnSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { startTestEnvd, type TestEnvd } from "../helpers/envd.js";

const goDir = join(fileURLToPath(new URL("../..", import.meta.url)), "test", "go");
const hasGo = spawnSync("go", ["version"], { stdio: "ignore" }).status === 0;
const TIMEOUT_MS = 240_000;

/** go test of a package of test/go; async on purpose: the servers run in this process and must keep serving. */
function goTest(pkg: string, env: Record<string, string>): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      "go",
      ["test", "-count=1", "-v", pkg],
      { cwd: goDir, timeout: TIMEOUT_MS - 10_000, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, ...env } },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
        resolve({ code, output: `${stdout}${stderr}` });
      },
    );
  });
}

function expectPassed({ code, output }: { code: number; output: string }): void {
  expect(code, `go test failed:\n${output}`).toBe(0);
  expect(output).toMatch(/^ok\s/m);
  expect(output, "the Go tests skipped instead of running").not.toContain("--- SKIP");
}

describe(hasGo ? "Go client (connect-go)" : "Go client tests: skipped because Go is missing (no `go` on PATH)", () => {
  let envd: TestEnvd | undefined;
  let cp: TestControlPlane | undefined;
  beforeAll(async () => {
    if (hasGo) envd = await startTestEnvd();
  });
  afterAll(async () => {
    await envd?.close();
    await cp?.close();
  });

  it.skipIf(!hasGo)("against envd: Process.Start streaming, Filesystem.Stat; connect binary/JSON and gRPC over h2c", async () => {
    expectPassed(await goTest(".", { LOCALE2B_ENVD_URL: envd!.url }));
  }, TIMEOUT_MS);

  it.skipIf(!hasGo)("through the control plane's envd proxy, routed by E2b-Sandbox-Id", async () => {
    cp = await startTestControlPlane();
    const sbx = await cp.manager.create({ templateId: "base", timeout: 300 });
    expectPassed(
      await goTest(".", { LOCALE2B_ENVD_URL: cp.url, LOCALE2B_SANDBOX_ID: sbx.id, LOCALE2B_ENVD_ACCESS_TOKEN: sbx.envdAccessToken }),
    );
  }, TIMEOUT_MS);

  it.skipIf(!hasGo)("the control plane's TemplateService: RequestBuild, GetBuildStatus, WatchBuild, errors; connect binary/JSON and gRPC over h2c", async () => {
    cp ??= await startTestControlPlane();
    expectPassed(await goTest("./controlplane/", { LOCALE2B_API_URL: cp.url, LOCALE2B_API_KEY: cp.apiKey }));
  }, TIMEOUT_MS);
});
