import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

// The dashboard's page is generated at build time (scripts/build-dashboard.mjs), not committed: two builds of
// the same sources give the same bytes, wherever they are written, and need nothing but node_modules.

const root = fileURLToPath(new URL("../..", import.meta.url));

describe("dashboard build", () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const buildInto = () => {
    const dir = mkdtempSync(join(tmpdir(), "locale2b-dashboard-build-"));
    dirs.push(dir);
    execFileSync(process.execPath, [join(root, "scripts", "build-dashboard.mjs"), dir], { cwd: root, stdio: "pipe" });
    return dir;
  };

  it("is reproducible, self-contained and names its assets by content hash", () => {
    const a = buildInto();
    const b = buildInto();
    const files = readdirSync(a).sort();
    expect(files).toEqual(readdirSync(b).sort());
    expect(files).toEqual(expect.arrayContaining(["index.html", "index.html.gz", "app.js", "app.js.gz", "app.css", "app.css.gz", "app.js.LEGAL.txt", "licenses.txt"]));
    for (const f of files) expect(readFileSync(join(a, f)).equals(readFileSync(join(b, f))), f).toBe(true);
    const html = readFileSync(join(a, "index.html"), "utf8");
    expect(html).toMatch(/app\.js\?v=[0-9a-f]{16}/);
    expect(html).toMatch(/app\.css\?v=[0-9a-f]{16}/);
    // No CDN, no other origin: everything the page loads comes from /dashboard/assets.
    for (const f of ["index.html", "app.js", "app.css"]) {
      const text = readFileSync(join(a, f), "utf8");
      expect(text, f).not.toMatch(/(src|href)=["']https?:\/\//);
      expect(text, f).not.toMatch(/@import\s+url\(["']?https?:/);
    }
    // The licences of what was bundled ship beside it, in full.
    const licences = readFileSync(join(a, "licenses.txt"), "utf8");
    for (const p of ["preact", "uplot", "@xterm/xterm", "@xterm/addon-fit", "@picocss/pico"]) expect(licences, p).toMatch(new RegExp(`^${p.replace("/", "\\/")} [0-9.]+ \\(MIT\\)$`, "m"));
  });
});
