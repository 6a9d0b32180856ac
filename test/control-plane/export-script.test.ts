// The build export's shell script (templates/guest-scripts.ts EXPORT_SCRIPT), run by a real sh
// with a stand-in `tar` first on PATH: which tar exits fail the build, and which are warnings.
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { EXPORT_SCRIPT } from "../../control-plane/templates/guest-scripts.js";

const dir = mkdtempSync(join(tmpdir(), "locale2b-export-script-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs the script with a `tar` that says it is GNU tar and then exits `code` (after a warning on stderr). */
function exportWith(code: number): { status: number | null; stdout: string; stderr: string } {
  const bin = join(dir, `bin-${code}`);
  spawnSync("mkdir", ["-p", bin]);
  writeFileSync(
    join(bin, "tar"),
    `#!/bin/sh\nif [ "$1" = --version ]; then echo "tar (GNU tar) 1.34"; exit 0; fi\necho archive\necho "tar: ./usr/lib/x: file changed as we read it" >&2\nexit ${code}\n`,
  );
  chmodSync(join(bin, "tar"), 0o755);
  const r = spawnSync("/bin/sh", ["-c", EXPORT_SCRIPT], { env: { PATH: `${bin}:/usr/bin:/bin` }, encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("the export script", () => {
  it("takes GNU tar's exit 1 (files changed while read) as done, its warning kept on stderr", () => {
    const r = exportWith(1);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe("archive\n");
    expect(r.stderr).toMatch(/file changed as we read it/);
  });

  it("fails on tar's exit 2 (a fatal error) and passes 0 through", () => {
    expect(exportWith(2).status).toBe(2);
    expect(exportWith(0).status).toBe(0);
  });
});
