#!/usr/bin/env node
// `npm test`: every check CI runs, then one closing line CI can read:
//   N passed, N failed, N skipped
// Steps: (1) gen/ is up to date with proto/ (scripts/generate.mjs --check),
// (2) the TypeScript type check, (3) vitest, (4) the Python e2b SDK suite
// (test/python, pytest in the venv scripts/setup-python-tests.sh creates; its
// sandbox-side part again on qemu and on gvisor where they run).
// A failed step (1) or (2) counts as one failed; (1) is skipped, and counted
// so, when Go is missing; (4) counts as one skipped when its venv is missing.
// Extra arguments go to vitest:
//   npm test -- test/envd/reflection.test.ts
// LOCALE2B_TEST_NO_CHECKS=1 skips (1) and (2) for a quicker loop.
// LOCALE2B_TEST_HOST_USER=1 runs the tests tagged host-envd (they run envd on the
// host) a second time, with a host account named `user` if the host has none and
// without it if it has one (scripts/host-user.sh).
// LOCALE2B_TEST_NO_PYTHON=1 skips (4); LOCALE2B_PYTEST_ARGS adds arguments to
// pytest (e.g. "-k pty -x"); LOCALE2B_PYTHON_VENV overrides the venv path.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { basename, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const bin = (name) => join(root, "node_modules", ".bin", name);

// What the run left on the host (a leak in a test or in the server): read before and after, reported, not counted.
function hostLeftovers() {
  const names = new Set();
  const list = (label, dir, keep) => {
    try {
      for (const d of readdirSync(dir, { withFileTypes: true })) if (keep(d)) names.add(`${label} ${d.name}`);
    } catch {
      // not there on this host
    }
  };
  // l2b: sandboxes; l2k: the test Kubernetes clusters (test/helpers/k8s/)
  list("network device", "/sys/class/net", (d) => /^l2[bk]/.test(d.name));
  list("network namespace", "/run/netns", (d) => /^l2[bk]/.test(d.name));
  for (const c of ["cpu", "pids", "freezer", "memory", ""]) list(`cgroup ${c || "v2"}`, join("/sys/fs/cgroup", c, "locale2b"), (d) => d.isDirectory());
  for (const c of ["cpu", "pids", "memory", ""]) list(`cgroup ${c || "v2"}`, join("/sys/fs/cgroup", c), (d) => d.isDirectory() && d.name.startsWith("locale2b-k8s-"));
  list("temporary", tmpdir(), (d) => /^(locale2b|l2b)/.test(d.name));
  return names;
}
const leftoversBefore = hostLeftovers();

let passed = 0;
let failed = 0;
let skipped = 0;
const failures = []; // what failed, for the summary
const skips = []; // which tests were skipped

function run(title, cmd, args) {
  const shown = cmd.startsWith(root) ? relative(root, cmd) : basename(cmd);
  process.stdout.write(`\n=== ${title}: ${[shown, ...args.map((a) => (a.startsWith(root) ? relative(root, a) : a))].join(" ")}\n`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
  const code = r.error ? `error ${r.error.message}` : (r.status ?? `signal ${r.signal}`);
  return { ok: code === 0, code };
}

/** The first lines of a failure's message, for the summary: CI keeps only the end of the output. */
function why(message) {
  if (!message) return "";
  const lines = String(message).replace(/\x1b\[[0-9;]*m/g, "").split("\n").map((l) => l.trim()).filter(Boolean);
  const said = lines.filter((l) => !l.startsWith("at ")).slice(0, 2);
  const where = lines.find((l) => l.startsWith("at ") && !l.includes("node_modules"));
  const text = [...said, ...(where ? [where] : [])].join(" | ");
  return `\n      ${text.length > 400 ? `${text.slice(0, 400)}…` : text}`;
}

function fail(what) {
  failed++;
  failures.push(what);
}

// 1, 2: checks that are not tests.
if (process.env.LOCALE2B_TEST_NO_CHECKS === "1") {
  process.stdout.write("LOCALE2B_TEST_NO_CHECKS=1: skipping the gen/ staleness check and the type check\n");
} else {
  const steps = [
    ["type check", bin("tsc"), ["-p", "tsconfig.json", "--noEmit"]],
    ["type check of the dashboard's browser code", bin("tsc"), ["-p", "control-plane/api/dashboard/web/tsconfig.json"]],
  ];
  // generate.mjs runs protoc-gen-go through `go run`: without Go it cannot check.
  if (spawnSync("go", ["version"], { stdio: "ignore" }).status === 0) {
    steps.unshift(["generated code is up to date", process.execPath, [join(root, "scripts", "generate.mjs"), "--check"]]);
  } else {
    skipped++;
    skips.push("generated code is up to date: Go is missing (no `go` on PATH); scripts/generate.mjs needs it");
  }
  for (const [title, cmd, args] of steps) {
    const r = run(title, cmd, args);
    // generate.mjs exits 3 when it could not generate at all (it says why, and leaves gen/ as committed).
    if (r.code === 3 && title.startsWith("generated code")) {
      skipped++;
      skips.push(`${title}: the generators could not run (see its output above); gen/ was left as committed`);
    } else if (!r.ok) fail(`${title} (exit ${r.code})`);
  }
}

// The runtimes start envd from dist/, the server serves the dashboard from dist/dashboard: build both so tests never run stale code.
{
  const r = run("build (dist/, used by the runtimes to start envd)", bin("tsc"), ["-p", "tsconfig.build.json"]);
  if (!r.ok) fail(`build (exit ${r.code})`);
  const d = run("build of the dashboard's page (dist/dashboard)", process.execPath, [join(root, "scripts", "build-dashboard.mjs")]);
  if (!d.ok) fail(`dashboard build (exit ${d.code})`);
}

// 2b: guest images for the microVM and gVisor suites (test/vm, test/rootfs,
// test/gvisor): the kernel and the `base` template, cached outside the clone by the hash of their
// inputs (a warm run takes a second). Needs root, debootstrap and gcc; as
// root without QEMU it runs scripts/setup-host first (as .ci/run does);
// otherwise the VM suites skip and say why. LOCALE2B_TEST_NO_VM=1 skips this step.
process.env.LOCALE2B_IMAGES_DIR ||= join(homedir(), ".cache", "locale2b", "images");
function hasQemu() {
  return spawnSync("qemu-system-x86_64", ["--version"], { stdio: "ignore" }).status === 0;
}
/** runsc, for the gvisor suites (scripts/setup-host installs it into /usr/local/bin). */
function hasRunsc() {
  return spawnSync("runsc", ["--version"], { stdio: "ignore" }).status === 0 || existsSync("/usr/local/bin/runsc");
}
/** As root on a Debian-like host without QEMU or runsc: install the toolchain (what .ci/run does first). */
function setupHost() {
  if (spawnSync("apt-get", ["--version"], { stdio: "ignore" }).status !== 0) return false;
  run("VM toolchain (scripts/setup-host: QEMU, vhost-device-vsock, runsc, debootstrap, gcc)", "bash", [join(root, "scripts", "setup-host")]);
  return hasQemu();
}
if (process.env.LOCALE2B_TEST_NO_VM === "1") {
  process.stdout.write("LOCALE2B_TEST_NO_VM=1: not building guest images; the VM suites will skip\n");
} else if (!(process.getuid?.() === 0 && (!hasQemu() || !hasRunsc()) ? setupHost() : hasQemu())) {
  process.stdout.write("qemu-system-x86_64 is missing: not building guest images; the VM suites will skip (scripts/setup-host installs QEMU)\n");
} else if (process.getuid?.() !== 0) {
  process.stdout.write("not root: not building guest images (debootstrap needs root); the VM suites run only if the images are already built\n");
} else {
  const kernel = run("guest kernel (cached)", "bash", [join(root, "scripts", "build-kernel.sh")]);
  if (!kernel.ok) fail(`guest kernel build (exit ${kernel.code})`);
  const template = run("base template (cached)", process.execPath, [join(root, "dist", "control-plane", "cli", "main.js"), "template", "build", "base"]);
  if (!template.ok) fail(`base template build (exit ${template.code})`);
  // The Code Interpreter SDKs' default template (test/code-interpreter/e2e.test.ts, test/python/test_code_interpreter.py).
  const ci = run("code-interpreter-v1 template (cached)", process.execPath, [join(root, "dist", "control-plane", "cli", "main.js"), "template", "build", "code-interpreter-v1"]);
  if (!ci.ok) fail(`code-interpreter-v1 template build (exit ${ci.code})`);
}

/**
 * Runs vitest (`cmd args…`, with a JSON report added) and counts its report, test names prefixed by `label`.
 * `countSkips` false: tests it did not run are not counted (a second pass over tests the first counted).
 * Returns the exit code when vitest wrote no report, else undefined.
 */
function runVitest(title, cmd, args, { label = "", countSkips = true } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "locale2b-vitest-"));
  const reportFile = join(dir, "report.json");
  try {
    const vitest = run(title, cmd, [...args, "--reporter=default", "--reporter=json", `--outputFile.json=${reportFile}`]);
    if (!existsSync(reportFile)) return vitest.code;
    const report = JSON.parse(readFileSync(reportFile, "utf8"));
    const failedBefore = failed;
    passed += report.numPassedTests;
    failed += report.numFailedTests;
    if (countSkips) skipped += report.numPendingTests + report.numTodoTests;
    for (const file of report.testResults) {
      const name = `${label}${relative(root, file.name)}`;
      for (const t of file.assertionResults) {
        if (t.status === "failed") failures.push(`${name} > ${t.fullName}${why(t.failureMessages?.[0])}`);
        else if (t.status !== "passed" && countSkips) skips.push(`${name} > ${t.fullName} [${t.status}]`);
      }
      // A failed file without a failed test: it did not load, or a hook threw.
      if (file.status === "failed" && !file.assertionResults.some((t) => t.status === "failed")) {
        fail(`${name}: ${file.message || "failed outside any test (a beforeAll/afterAll hook?)"}`);
      }
    }
    if (!vitest.ok && failed === failedBefore) fail(`${label}vitest exited with ${vitest.code} though no test failed (unhandled errors?)`);
    return undefined;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// 3: tests, with a JSON report beside the usual output.
{
  const code = runVitest("tests", bin("vitest"), ["run", ...process.argv.slice(2)]);
  if (code !== undefined) fail(`vitest wrote no report (exit ${code})`);
}

// 3b: with LOCALE2B_TEST_HOST_USER=1 (.ci/run sets it), the tests that run envd on the host (vitest tag
// host-envd) again, the other way round about an ordinary account named `user`, which many VM images have:
// added if the host has none, removed if it has one (scripts/host-user.sh: a private mount namespace; the
// host's accounts are not touched). envd run as root acts as `user` when that account exists: these tests
// must pass either way (issue 26). Counted under "[host user] " or "[no host user] "; what they skip was
// counted by step 3.
function hostEnvdFiles() {
  const found = [];
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".test.ts") && readFileSync(p, "utf8").includes("host-envd")) found.push(relative(root, p));
    }
  };
  walk(join(root, "test"));
  // Only those the run's own filters (`npm test -- test/envd`) name, if any.
  const filters = process.argv.slice(2).filter((a) => !a.startsWith("-"));
  return found.sort().filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)));
}
if (process.env.LOCALE2B_TEST_HOST_USER === "1") {
  const files = hostEnvdFiles();
  const hostHasUser = /^user:/m.test(readFileSync("/etc/passwd", "utf8"));
  const [mode, label, what] = hostHasUser ? ["without", "[no host user] ", "without the host's account named `user`"] : ["with", "[host user] ", "with a host account named `user`"];
  const why = process.getuid?.() !== 0 ? "needs root (a private mount namespace)" : files.length === 0 ? "no test file tagged host-envd among those asked for" : undefined;
  if (why) {
    skipped++;
    skips.push(`${label}the tests tagged host-envd again ${what}: ${why}`);
  } else {
    const script = join(root, "scripts", "host-user.sh");
    const code = runVitest(`tests that run envd on the host, ${what}`, "bash", [script, mode, bin("vitest"), "run", "--tagsFilter", "host-envd", ...files], {
      label,
      countSkips: false,
    });
    if (code !== undefined) fail(`${label}vitest wrote no report (exit ${code}; scripts/host-user.sh exits 3 or 4 saying why)`);
  }
}

// 4: the real Python e2b SDK against a real control plane (test/python).
// The venv is keyed by requirements.txt, exactly as scripts/setup-python-tests.sh
// names it; without it (no python3 or no PyPI when .ci/run set up) the suite
// is one skipped test, with the reason.
function pythonVenv() {
  if (process.env.LOCALE2B_PYTHON_VENV) return process.env.LOCALE2B_PYTHON_VENV;
  const key = createHash("sha256").update(readFileSync(join(root, "test", "python", "requirements.txt"))).digest("hex").slice(0, 16);
  return join(homedir(), ".cache", "locale2b", `venv-${key}`);
}

/** Attribute values of an XML start tag's attribute string, entities decoded. */
function xmlAttrs(text) {
  const attrs = {};
  for (const m of text.matchAll(/([\w:-]+)="([^"]*)"/g)) {
    attrs[m[1]] = m[2].replace(/&(lt|gt|quot|apos|amp|#(\d+)|#x([0-9a-f]+));/gi, (all, name, dec, hex) =>
      dec ? String.fromCodePoint(Number(dec)) : hex ? String.fromCodePoint(parseInt(hex, 16)) : { lt: "<", gt: ">", quot: '"', apos: "'", amp: "&" }[name.toLowerCase()] ?? all,
    );
  }
  return attrs;
}

/** Runs pytest in the venv and counts its junit report under `label`. */
function runPytest(python, label, targets, env = {}) {
  const pyDir = mkdtempSync(join(tmpdir(), "locale2b-pytest-"));
  const junit = join(pyDir, "junit.xml");
  try {
    // Split like a shell would for simple cases: LOCALE2B_PYTEST_ARGS='-k "pty or watch" -x'.
    const extra = [...(process.env.LOCALE2B_PYTEST_ARGS ?? "").matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]);
    const args = ["-m", "pytest", ...targets, "-q", `--junitxml=${junit}`, ...extra];
    const shownEnv = Object.entries(env).map(([k, v]) => `${k}=${v} `).join("");
    process.stdout.write(`\n=== ${label}: ${shownEnv}${python} ${args.map((a) => a.replace(junit, "<tmp>/junit.xml")).join(" ")}\n`);
    // pytest-timeout bounds each test; this bounds the whole run.
    const r = spawnSync(python, args, { cwd: root, stdio: "inherit", timeout: 45 * 60_000, killSignal: "SIGTERM", env: { ...process.env, ...env } });
    const code = r.error ? `error ${r.error.message}` : (r.status ?? `signal ${r.signal}`);
    if (!existsSync(junit)) {
      fail(`${label}: pytest wrote no report (exit ${code})`);
      return;
    }
    const xml = readFileSync(junit, "utf8");
    const failedBefore = failed;
    for (const m of xml.matchAll(/<testsuite\b([^>]*)>/g)) {
      const a = xmlAttrs(m[1]);
      const tests = Number(a.tests ?? 0);
      const bad = Number(a.failures ?? 0) + Number(a.errors ?? 0);
      const skip = Number(a.skipped ?? 0);
      passed += Math.max(0, tests - bad - skip);
      failed += bad;
      skipped += skip;
    }
    for (const m of xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
      const a = xmlAttrs(m[1]);
      const name = `${label} > ${a.classname ? `${a.classname}.` : ""}${a.name}`;
      const body = m[2] ?? "";
      const bad = body.match(/<(?:failure|error)\b([^>]*)/);
      if (bad) failures.push(`${name}${why(xmlAttrs(bad[1]).message)}`);
      else {
        const sk = body.match(/<skipped\b([^>]*)/);
        if (sk) skips.push(`${name} [${xmlAttrs(sk[1]).message ?? "skipped"}]`);
      }
    }
    if (code !== 0 && failed === failedBefore) fail(`${label}: pytest exited with ${code} though no test failed`);
  } finally {
    rmSync(pyDir, { recursive: true, force: true });
  }
}

if (process.env.LOCALE2B_TEST_NO_PYTHON === "1") {
  skipped++;
  skips.push("Python e2b SDK suite: LOCALE2B_TEST_NO_PYTHON=1");
} else {
  const venv = pythonVenv();
  const python = join(venv, "bin", "python");
  const ready = existsSync(python) && spawnSync(python, ["-c", "import pytest"], { stdio: "ignore" }).status === 0;
  if (!ready) {
    skipped++;
    skips.push("Python e2b SDK suite: no venv; .ci/run creates it (scripts/setup-python-tests.sh)");
  } else {
    runPytest(python, "test/python", ["test/python"]);
    // 4b: the sandbox-side part of the suite (commands, files, PTY) against QEMU microVMs,
    // when the VM suite can run here (the images were built above).
    if (process.env.LOCALE2B_TEST_NO_VM !== "1" && hasQemu() && process.getuid?.() === 0 && failures.every((f) => !/template build|kernel build/.test(f))) {
      // and volumes (virtio-fs; the kernel built above has it).
      const files = ["test_commands.py", "test_files.py", "test_pty.py", "test_volumes.py"].map((f) => `test/python/${f}`);
      runPytest(python, "test/python[qemu]", files, { LOCALE2B_RUNTIME: "qemu", LOCALE2B_WARM_POOL: "1" });
    }
    // 4c: the same part against gVisor sandboxes, where runsc is installed (scripts/setup-host) and the base image built,
    // the pause (to disk on gvisor) with processes that go on after the resume, and volumes.
    if (process.env.LOCALE2B_TEST_NO_VM !== "1" && hasRunsc() && process.getuid?.() === 0 && failures.every((f) => !/template build/.test(f))) {
      const files = [
        ...["test_commands.py", "test_files.py", "test_pty.py"].map((f) => `test/python/${f}`),
        "test/python/test_sandbox.py::test_pause_and_connect_resumes_with_files_and_processes",
        // Volumes: id-mapped binds in the OCI bundle (control-plane/runtimes/gvisor/volume-binds.ts).
        "test/python/test_volumes.py",
      ];
      runPytest(python, "test/python[gvisor]", files, { LOCALE2B_RUNTIME: "gvisor", LOCALE2B_WARM_POOL: "1" });
    }
  }
}

const out = [];
const leftovers = [...hostLeftovers()].filter((n) => !leftoversBefore.has(n));
if (leftovers.length) out.push("", `Left on the host by this run (a leak to look into; not counted):`, ...leftovers.map((n) => `  - ${n}`));
if (skips.length) out.push("", `Skipped (${skips.length}); the suite name says why where known:`, ...skips.map((s) => `  - ${s}`));
if (failures.length) out.push("", `Failed (${failures.length}):`, ...failures.map((f) => `  - ${f}`));
out.push("", `${passed} passed, ${failed} failed, ${skipped} skipped`);
process.stdout.write(`${out.join("\n")}\n`);
process.exitCode = failed > 0 ? 1 : 0;
