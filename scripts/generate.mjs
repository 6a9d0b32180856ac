#!/usr/bin/env node
// Regenerates gen/ from proto/ with buf and pinned local plugins:
//   gen/ts  protobuf-es v2 (messages + service descriptors)
//   gen/go  protoc-gen-go + protoc-gen-connect-go (module github.com/locale2b/locale2b/gen/go)
// Generated files are removed first so a deleted proto leaves nothing behind.
// `node scripts/generate.mjs --check` fails when gen/ differs from what is committed.
// The Go plugins are built from gen/go's own module requirements (go.mod and
// go.sum pin them) into .cache/protoc-plugins, from the module cache when it
// has them (no network), so a package registry's mood cannot change the result.
// When generation itself fails (no Go, no module), gen/ is put back as
// committed and the exit code is 3: "could not check", not "stale".
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const keep = new Set(["gen/go/go.mod", "gen/go/go.sum"]);

function clean(dir) {
  for (const name of readdirSync(join(root, dir))) {
    const rel = `${dir}/${name}`;
    if (keep.has(rel)) continue;
    if (statSync(join(root, rel)).isDirectory()) {
      clean(rel);
      if (readdirSync(join(root, rel)).length === 0) rmSync(join(root, rel), { recursive: true });
    } else if (/\.(ts|go)$/.test(name)) {
      rmSync(join(root, rel));
    }
  }
}

const plugins = join(root, ".cache", "protoc-plugins");
function buildPlugins() {
  mkdirSync(plugins, { recursive: true });
  for (const [name, pkg] of [
    ["protoc-gen-go", "google.golang.org/protobuf/cmd/protoc-gen-go"],
    ["protoc-gen-connect-go", "connectrpc.com/connect/cmd/protoc-gen-connect-go"],
  ]) {
    const build = (env) => execFileSync("go", ["build", "-o", join(plugins, name), pkg], { cwd: join(root, "gen", "go"), stdio: "pipe", env: { ...process.env, ...env } });
    try {
      build({ GOPROXY: "off", GOFLAGS: "-mod=mod" });
    } catch {
      build({ GOFLAGS: "-mod=mod" }); // not in the module cache yet: download it
    }
  }
}

function restore() {
  execFileSync("git", ["checkout", "--", "gen"], { cwd: root, stdio: "ignore" });
  execFileSync("git", ["clean", "-fdq", "--", "gen"], { cwd: root, stdio: "ignore" });
}

try {
  buildPlugins();
  clean("gen/ts");
  clean("gen/go");
  const buf = join(root, "node_modules", ".bin", "buf");
  const PATH = [plugins, join(root, "node_modules", ".bin"), process.env.PATH].join(":");
  execFileSync(buf, ["generate"], { cwd: root, stdio: "inherit", env: { ...process.env, PATH } });
} catch (err) {
  restore();
  process.stderr.write(`generation failed, gen/ left as committed: ${err.stderr?.toString().trim() || err.message}\n`);
  process.exit(3);
}

if (process.argv.includes("--check")) {
  const status = execFileSync("git", ["status", "--porcelain", "--", "gen"], { cwd: root, encoding: "utf8" });
  if (status.trim()) {
    process.stderr.write(`gen/ is stale: 'npm run generate' changed:\n${status}`);
    process.exit(1);
  }
  process.stdout.write("gen/ is up to date with proto/\n");
}
