// E2B's Template SDK `fromImage` with the real `e2b` JS SDK, against a real
// control plane on the process runtime and a real registry on loopback
// (Debian's docker-registry, htpasswd auth) holding images this test builds
// with umoci and pushes with skopeo: a small glibc root made of this host's
// programs (bash, coreutils, tar) with ENV, WORKDIR and USER in its config;
// a musl root with no glibc at all (musl's loader, a musl-linked program,
// busybox as /bin/sh, no bash); a root with no shell at all; a root whose
// /etc/ld.so.preload kills every program. envd runs in each on its own Node,
// loader and libraries (/opt/locale2b), or the build says why it cannot.
// Needs root.
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Sandbox, Template, type LogEntry } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findExecutable } from "../../control-plane/host/executables.js";
import { GUEST, imagesDir } from "../../control-plane/images/layout.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { ensureTestTools, ImageBuilder, startRegistry, type TestRegistry } from "../helpers/oci-registry.js";
import { setEnv } from "../helpers/sdk.js";

/** musl's C library, which is also its loader (Debian's musl package). */
const MUSL_LIBC = "/usr/lib/x86_64-linux-musl/libc.so";
const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip =
  caps.mode !== "sandbox"
    ? "needs the control plane to run as root (sandbox mode)"
    : (caps.missing ?? ensureTestTools({ "musl-gcc": "musl-tools", gcc: "gcc" }) ?? (existsSync(MUSL_LIBC) ? undefined : `no ${MUSL_LIBC} (musl)`));

const USER = { username: "builder", password: "b1ild-Pa55" };
/** What the glibc image's config says. */
const IMAGE_ENV = { GREETING: "hello from the image" };

let dir = "";
let registry: TestRegistry;
let cp: TestControlPlane;
let restoreEnv = () => {};
const sandboxes: Sandbox[] = [];
let n = 0;
const unique = (what: string) => `${what}-${process.pid}-${n++}`;

/** Copies host files into `root` at the same paths (merged /usr: /bin, /lib, /lib64 are links), with every library they load. */
function copyHostPrograms(root: string, programs: string[]): void {
  for (const d of ["usr/bin", "usr/lib", "usr/lib64"]) mkdirSync(join(root, d), { recursive: true });
  for (const l of ["bin", "lib", "lib64"]) symlinkSync(`usr/${l}`, join(root, l));
  const files = new Set<string>();
  for (const p of programs) {
    const path = findExecutable(p);
    if (!path) throw new Error(`${p} is not on this host`);
    files.add(path);
    for (const m of spawnSync("ldd", [path], { encoding: "utf8" }).stdout.matchAll(/(\/\S+) \(0x/g)) files.add(m[1]!);
  }
  for (const f of files) {
    // Where the file is (through the host's /bin -> usr/bin), under /usr as merged-usr roots have it.
    const real = realpathSync(f);
    const at = join(root, real.startsWith("/usr/") ? real : `/usr${real}`);
    mkdirSync(dirname(at), { recursive: true });
    copyFileSync(real, at);
    chmodSync(at, 0o755);
    // The name it was asked for too (libc.so.6 -> libc-2.36.so on older hosts; /lib64/ld-linux-x86-64.so.2 is a link).
    const asked = join(root, f.startsWith("/usr/") ? f : `/usr${f}`);
    if (asked !== at && !existsSync(asked)) {
      mkdirSync(dirname(asked), { recursive: true });
      copyFileSync(real, asked);
    }
  }
}

function etc(root: string, passwd: string, group: string): void {
  mkdirSync(join(root, "etc"), { recursive: true });
  writeFileSync(join(root, "etc/passwd"), passwd);
  writeFileSync(join(root, "etc/group"), group);
}

/** A small Debian-like root: this host's bash, dash as /bin/sh, coreutils, grep and GNU tar, with their glibc. */
function glibcImage(b: ImageBuilder): void {
  b.create("glibc").layer("glibc", (root) => {
    copyHostPrograms(root, ["bash", "dash", "cat", "ls", "id", "env", "pwd", "whoami", "mkdir", "rm", "cp", "chmod", "chown", "mktemp", "dirname", "basename", "touch", "grep", "tar", "head", "readlink", "sort", "find"]);
    symlinkSync("dash", join(root, "usr/bin/sh"));
    // uid 1000 is the image's own user's, as `node` in node:* and `ubuntu` in ubuntu:24.04: the sandbox user gets the next free id.
    etc(root, "root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/home/app:/bin/bash\n", "root:x:0:\napp:x:1000:\n");
    writeFileSync(join(root, "etc/shells"), "/bin/sh\n/bin/bash\n");
    for (const d of ["srv/app", "home/app", "root", "tmp"]) mkdirSync(join(root, d), { recursive: true });
    chmodSync(join(root, "tmp"), 0o1777);
    writeFileSync(join(root, "srv/app/README"), "the app's files\n");
    chownSync(join(root, "srv/app"), 1000, 1000);
    chownSync(join(root, "home/app"), 1000, 1000);
  });
  b.config("glibc", { env: ["PATH=/usr/local/bin:/usr/bin:/bin", `GREETING=${IMAGE_ENV.GREETING}`], workdir: "/srv/app", user: "app", cmd: ["/bin/bash"] });
  b.push("glibc", `${registry.host}/team/app:v1`, `${USER.username}:${USER.password}`);
}

/** An alpine-like root: musl's loader (its libc too), a musl-linked program, busybox as /bin/sh; no glibc, no bash. */
function muslImage(b: ImageBuilder): void {
  writeFileSync(join(dir, "hello.c"), '#include <stdio.h>\nint main(void) { puts("hello from musl"); return 0; }\n');
  const cc = spawnSync("musl-gcc", ["-o", join(dir, "hello-musl"), join(dir, "hello.c")], { encoding: "utf8" });
  if (cc.status !== 0) throw new Error(`musl-gcc failed: ${cc.stderr}`);
  b.create("musl").layer("musl", (root) => {
    for (const d of ["bin", "lib", "usr/bin", "root", "tmp"]) mkdirSync(join(root, d), { recursive: true });
    chmodSync(join(root, "tmp"), 0o1777);
    copyFileSync(MUSL_LIBC, join(root, "lib/ld-musl-x86_64.so.1"));
    symlinkSync("ld-musl-x86_64.so.1", join(root, "lib/libc.musl-x86_64.so.1"));
    copyFileSync(join(dir, "hello-musl"), join(root, "usr/bin/hello-musl"));
    chmodSync(join(root, "usr/bin/hello-musl"), 0o755);
    copyFileSync(findExecutable("busybox")!, join(root, "bin/busybox"));
    chmodSync(join(root, "bin/busybox"), 0o755);
    for (const applet of ["sh", "ash", "echo", "cat", "ls", "id", "whoami", "env", "pwd", "mkdir", "rm", "grep", "tar", "test", "readlink", "sort"]) symlinkSync("busybox", join(root, "bin", applet));
    etc(root, "root:x:0:0:root:/root:/bin/sh\n", "root:x:0:\n");
    writeFileSync(join(root, "etc/os-release"), 'NAME="musl test root"\nID=musl-test\n');
  });
  b.config("musl", { env: ["PATH=/usr/bin:/bin"], cmd: ["/bin/sh"] });
  b.push("musl", `${registry.host}/small/musl:1`, `${USER.username}:${USER.password}`);
}

/**
 * A root whose loader configuration kills every program at start, envd's too: /etc/ld.so.preload
 * names a library whose constructor exits (glibc's loader, envd's own included, honours the file).
 */
function refusingImage(b: ImageBuilder): void {
  writeFileSync(join(dir, "refuse.c"), '#include <unistd.h>\n__attribute__((constructor)) static void refuse(void) { static const char m[] = "refuse.so: no program may start in this image\\n"; write(2, m, sizeof m - 1); _exit(42); }\n');
  const so = spawnSync("gcc", ["-shared", "-fPIC", "-o", join(dir, "refuse.so"), join(dir, "refuse.c")], { encoding: "utf8" });
  if (so.status !== 0) throw new Error(`gcc failed: ${so.stderr}`);
  b.create("refuse").layer("refuse", (root) => {
    etc(root, "root:x:0:0:root:/root:/bin/sh\n", "root:x:0:\n");
    mkdirSync(join(root, "lib"));
    copyFileSync(join(dir, "refuse.so"), join(root, "lib/refuse.so"));
    writeFileSync(join(root, "etc/ld.so.preload"), "/lib/refuse.so\n");
  });
  b.push("refuse", `${registry.host}/small/refuse:1`, `${USER.username}:${USER.password}`);
}

/** A root with no shell at all (a distroless-like image): a user database and data. */
function noShellImage(b: ImageBuilder): void {
  b.create("noshell").layer("noshell", (root) => {
    etc(root, "root:x:0:0:root:/root:/sbin/nologin\n", "root:x:0:\n");
    mkdirSync(join(root, "data"));
    writeFileSync(join(root, "data/hello.txt"), "data without a shell\n");
  });
  b.push("noshell", `${registry.host}/small/noshell:1`, `${USER.username}:${USER.password}`);
}

beforeAll(async () => {
  if (skip) return;
  dir = mkdtempSync(join(tmpdir(), "locale2b-tpl-images-"));
  registry = await startRegistry(join(dir, "registry"), { [USER.username]: USER.password });
  const b = new ImageBuilder(join(dir, "layout"), join(dir, "work"));
  for (const image of [glibcImage, muslImage, refusingImage, noShellImage]) image(b);
  // Plain HTTP on loopback: the server is told before it starts (and reads it at each pull).
  restoreEnv = setEnv({ LOCALE2B_INSECURE_REGISTRIES: registry.host });
  cp = await startTestControlPlane({ runtime });
  const restoreSdk = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  const restoreRegistries = restoreEnv;
  restoreEnv = () => (restoreSdk(), restoreRegistries());
}, 300_000);

afterAll(async () => {
  await Promise.all(sandboxes.map((s) => s.kill().catch(() => false)));
  // The image cache is the host's: this run's templates (deleting one removes its images) and its pulls go.
  for (const name of built) await fetch(`${cp.url}/templates/${name}`, { method: "DELETE", headers: { "x-api-key": cp.apiKey } }).catch(() => undefined);
  if (registry) removePulledImages(registry.host);
  restoreEnv();
  await cp?.close();
  await registry?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The images this run pulled from `host` (made runnable, and unpacked): every pull of a fresh registry is new. */
function removePulledImages(host: string): void {
  const images = imagesDir();
  const templates = join(images, "templates");
  for (const d of existsSync(templates) ? readdirSync(templates) : []) {
    if (!d.startsWith("@oci-") || d.endsWith(".current")) continue;
    let m: { name: string; definition?: { from?: string; digest?: string } };
    try {
      m = JSON.parse(readFileSync(join(templates, d, "manifest.json"), "utf8")) as typeof m;
    } catch {
      continue;
    }
    if (!m.definition?.from?.startsWith(`${host}/`)) continue;
    rmSync(join(templates, d), { recursive: true, force: true });
    rmSync(join(templates, `${m.name}.current`), { force: true });
    if (m.definition.digest) rmSync(join(images, "oci", "images", m.definition.digest.replace(/^sha256:/, "")), { recursive: true, force: true });
  }
}

async function create(template: string): Promise<Sandbox> {
  const sbx = await Sandbox.create(template, { timeoutMs: 600_000 });
  sandboxes.push(sbx);
  return sbx;
}

/** Templates this run built (or tried to): deleted at the end. */
const built: string[] = [];

/** Builds; the log's messages, or the build's error with them. */
async function build(template: Parameters<typeof Template.build>[0], name: string): Promise<{ messages: string[]; error?: Error }> {
  built.push(name);
  const messages: string[] = [];
  const error = await Template.build(template, name, { onBuildLogs: (l: LogEntry) => messages.push(l.message) }).then(
    () => undefined,
    (e: Error) => e,
  );
  return { messages, error };
}

async function buildStatus(name: string): Promise<unknown> {
  const headers = { "x-api-key": cp.apiKey };
  const t = (await (await fetch(`${cp.url}/templates/${name}`, { headers })).json()) as { builds: { buildID: string }[] };
  return (await fetch(`${cp.url}/templates/${name}/builds/${t.builds[0]!.buildID}/status`, { headers })).json();
}

describe.skipIf(skip !== undefined)(`fromImage from a registry on loopback${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 600_000 }, () => {
  it("with the right credentials: the sandbox runs commands as the image's USER, in its WORKDIR, with its ENV", async () => {
    const name = unique("glibc");
    const r = await build(Template().fromImage(`${registry.host}/team/app:v1`, USER), name);
    expect(r.error, r.messages.join("\n")).toBeUndefined();
    const s = await create(name);
    const out = await s.commands.run('echo "$GREETING"; pwd; whoami; cat README', { timeoutMs: 60_000 });
    expect(out.stdout).toBe(`${IMAGE_ENV.GREETING}\n/srv/app\napp\nthe app's files\n`);
    // root too, and the sandbox user E2B's SDK knows.
    expect((await s.commands.run("whoami", { user: "root", timeoutMs: 60_000 })).stdout).toBe("root\n");
    expect((await s.commands.run("whoami; echo $HOME; id -u", { user: "user", timeoutMs: 60_000 })).stdout).toBe(`user\n${GUEST.home}\n1001\n`);
    expect((await s.commands.run("ls -ld $HOME", { user: "user", timeoutMs: 60_000 })).stdout).toMatch(/^d\S+ +\d+ user user /);
    expect((await s.commands.run("id -u", { timeoutMs: 60_000 })).stdout).toBe("1000\n");
  });

  it("without credentials: the build fails at step base with the registry's refusal", async () => {
    const name = unique("noauth");
    const r = await build(Template().fromImage(`${registry.host}/team/app:v1`), name);
    expect(r.error?.name).toBe("BuildError");
    expect(r.error?.message).toMatch(/unauthorized|credentials|authentication/i);
    expect(await buildStatus(name)).toMatchObject({ status: "error", reason: { step: "base" } });
    await expect(Sandbox.create(name)).rejects.toThrow(/not found/);
  });

  it("a tag the registry does not have: the build fails at step base, saying it is not there", async () => {
    const name = unique("notag");
    const r = await build(Template().fromImage(`${registry.host}/team/app:no-such-tag`, USER), name);
    expect(r.error?.name).toBe("BuildError");
    expect(r.error?.message).toMatch(/not found|does not exist|no such|manifest unknown/i);
    expect(r.error?.message).toContain("no-such-tag");
    expect(await buildStatus(name)).toMatchObject({ status: "error", reason: { step: "base" } });
  });

  it("a musl root without glibc or bash: envd runs on its own libraries, commands run with the image's /bin/sh", async () => {
    const name = unique("musl");
    const r = await build(Template().fromImage(`${registry.host}/small/musl:1`, USER), name);
    expect(r.error, r.messages.join("\n")).toBeUndefined();
    const s = await create(name);
    expect((await s.commands.run("echo hi", { timeoutMs: 60_000 })).stdout).toBe("hi\n");
    // pty.create starts `/bin/bash -i -l` too: the image's shell answers.
    let term = "";
    const pty = await s.pty.create({ cols: 80, rows: 24, onData: (d: Uint8Array) => void (term += new TextDecoder().decode(d)), timeoutMs: 60_000 });
    await s.pty.sendInput(pty.pid, new TextEncoder().encode("echo pty-$((6*7))\n"));
    for (let i = 0; i < 600 && !/pty-42\r?\n/.test(term); i++) await new Promise((r) => setTimeout(r, 50));
    expect(term).toMatch(/pty-42\r?\n/);
    await s.pty.kill(pty.pid);
    // The image's own program, on the image's musl.
    expect((await s.commands.run("hello-musl", { timeoutMs: 60_000 })).stdout).toBe("hello from musl\n");
    // No glibc of the image's: no loader or libc where glibc keeps them.
    expect((await s.commands.run("ls /lib; ls /lib64 /lib/x86_64-linux-gnu 2>&1 || true", { timeoutMs: 60_000 })).stdout).not.toMatch(/libc\.so\.6|ld-linux/);
    // envd's Node maps only /opt/locale2b's libraries.
    const maps = await s.commands.run(
      `for p in /proc/[0-9]*; do [ "$(readlink $p/exe)" = ${GUEST.node} ] && grep -o '/[^ ]*[.]so[^ ]*' $p/maps; done | sort -u`,
      { user: "root", timeoutMs: 60_000 },
    );
    const libs = maps.stdout.trim().split("\n");
    expect(libs).toContain(`${GUEST.lib}/libc.so.6`);
    expect(libs.filter((l) => !l.startsWith(`${GUEST.lib}/`))).toEqual([]);
  });

  it("an image whose envd cannot start: the build fails at step base, saying why", async () => {
    const name = unique("refuse");
    const r = await build(Template().fromImage(`${registry.host}/small/refuse:1`, USER), name);
    expect(r.error?.name, r.messages.join("\n")).toBe("BuildError");
    // Said at once (envd exited each time the init started it), not after the start timeout.
    expect(r.error?.message).toMatch(/envd cannot start in this image: it exited with status 42, printing: refuse\.so: no program may start in this image \(\d+ times in a row\)/);
    expect(await buildStatus(name)).toMatchObject({ status: "error", reason: { step: "base" } });
  });

  it("a root with no shell at all: envd answers (files work); a command that needs a shell fails, saying so", async () => {
    const name = unique("noshell");
    const r = await build(Template().fromImage(`${registry.host}/small/noshell:1`, USER), name);
    expect(r.error, r.messages.join("\n")).toBeUndefined();
    const s = await create(name);
    expect(await s.files.read("/data/hello.txt")).toBe("data without a shell\n");
    await s.files.write("/home/user/note.txt", "written by the SDK\n");
    expect(await s.files.read("/home/user/note.txt")).toBe("written by the SDK\n");
    expect((await s.files.list("/data")).map((e) => e.name)).toEqual(["hello.txt"]);
    const err = await s.commands.run("echo hi", { timeoutMs: 60_000 }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/'\/bin\/bash': No such file or directory, and there is no \/bin\/sh either: this sandbox's image has no shell/);
    // A build whose steps need a shell says so, at its first step.
    const withSteps = unique("noshell-steps");
    const steps = await build(Template().fromImage(`${registry.host}/small/noshell:1`, USER).runCmd("echo hi"), withSteps);
    expect(steps.error?.message).toMatch(/the build's steps run in a shell, and the image has none/);
    expect(await buildStatus(withSteps)).toMatchObject({ status: "error", reason: { step: "1" } });
  });
});
