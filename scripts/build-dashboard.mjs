#!/usr/bin/env node
// `npm run build`'s second step: bundles the dashboard's page (control-plane/api/dashboard/web: Preact,
// Pico CSS, uPlot, xterm.js, all from node_modules) with esbuild into dist/dashboard/, which the control
// plane serves at /dashboard (control-plane/api/dashboard/assets.ts): app.js, app.css, index.html naming
// them by content hash, their third-party licences (*.LEGAL.txt) and gzipped copies. Nothing is fetched
// from elsewhere at run time. The output depends only on the sources and the locked packages: the same
// inputs give the same bytes (test/control-plane/dashboard-build.test.ts builds twice and compares), so
// it is generated, not committed (dist/ is ignored).
//   node scripts/build-dashboard.mjs [out-dir]      (default: dist/dashboard)
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { build } from "esbuild";

const root = fileURLToPath(new URL("..", import.meta.url));
const src = join(root, "control-plane", "api", "dashboard", "web");
const out = process.argv[2] ?? join(root, "dist", "dashboard");

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await build({
  absWorkingDir: root,
  metafile: true,
  entryPoints: { app: join(src, "main.tsx") },
  outdir: out,
  bundle: true,
  minify: true,
  format: "esm",
  // Browsers of the last few years; nothing here needs a polyfill.
  target: ["es2022", "chrome111", "firefox115", "safari16.4"],
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "linked",
  charset: "utf8",
  sourcemap: false,
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "warning",
});

// The licences of every package bundled, in full (esbuild's LEGAL files keep only the @license comments).
const packages = new Set();
for (const input of Object.keys(result.metafile.inputs)) {
  const m = /(?:^|\/)node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
  if (m) packages.add(m[1]);
}
const licences = [...packages].sort().map((name) => {
  const dir = join(root, "node_modules", name);
  const { version, license } = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const file = readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
  return `${name} ${version} (${license})\n\n${file ? readFileSync(join(dir, file), "utf8").trim() : "(no licence file in the package)"}\n`;
});
writeFileSync(join(out, "licenses.txt"), `The dashboard's page bundles these packages:\n\n${licences.join("\n----\n\n")}`);

const hash = (name) => createHash("sha256").update(readFileSync(join(out, name))).digest("hex").slice(0, 16);
const html = readFileSync(join(src, "index.html"), "utf8").replace("%CSS_HASH%", hash("app.css")).replace("%JS_HASH%", hash("app.js"));
writeFileSync(join(out, "index.html"), html);

let total = 0;
let gzipped = 0;
for (const name of readdirSync(out).sort()) {
  const body = readFileSync(join(out, name));
  // zlib writes no timestamp or name in the gzip header: the same input gives the same bytes.
  const gz = gzipSync(body, { level: 9 });
  writeFileSync(join(out, `${name}.gz`), gz);
  if (!name.endsWith(".txt")) {
    total += body.length;
    gzipped += gz.length;
  }
}
process.stdout.write(`dashboard: ${relative(root, out) || out} (${(total / 1024).toFixed(0)} KiB, ${(gzipped / 1024).toFixed(0)} KiB gzipped)\n`);
