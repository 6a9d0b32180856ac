// pullImage against real registries on loopback (Debian's docker-registry,
// one with htpasswd users, one open) holding images this test builds with
// umoci and pushes with skopeo: credentials, errors that say what to fix,
// layers and whiteouts, the image's config, multi-arch, zstd, the cache,
// limits, cancellation, concurrent pulls.
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findExecutable } from "../../control-plane/host/executables.js";
import { ImagePullError, pullImage, type PullImageOptions } from "../../control-plane/images/oci/pull.js";
import type { RegistrySettings } from "../../control-plane/images/oci/registry-settings.js";
import { ensureTestTools, ImageBuilder, startRegistry, type TestRegistry } from "../helpers/oci-registry.js";

const missing = ensureTestTools();
const why = missing ? ` [skipped: ${missing}]` : "";

const log = pino({ level: "silent" });
const USER = { username: "alice", password: "s3cret-Pa55" };
/** A service account key as GCP hands it out (fake, minified: one line). */
const GCP_KEY = JSON.stringify({ type: "service_account", project_id: "locale2b-test", private_key_id: "0123abcd", client_email: "puller@locale2b-test.iam.gserviceaccount.com" });

let dir = "";
let authReg: TestRegistry;
let openReg: TestRegistry;
let settings: RegistrySettings;
let b: ImageBuilder;
let musl: string | undefined; // why the musl image could not be built

function fresh(name: string): string {
  const d = join(dir, "cache", name);
  mkdirSync(d, { recursive: true });
  return d;
}

async function pull(o: Partial<PullImageOptions> & { ref: string; imagesDir: string }) {
  return pullImage({ log, settings, ...o });
}

async function pullError(o: Partial<PullImageOptions> & { ref: string; imagesDir: string }): Promise<ImagePullError> {
  const err = await pull(o).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ImagePullError);
  return err as ImagePullError;
}

/** Nothing half-done left: no work folder, and no image folder unless one was pulled. */
function leftovers(imagesDir: string): { tmp: string[]; images: string[] } {
  const ls = (d: string) => (existsSync(d) ? readdirSync(d) : []);
  return { tmp: ls(join(imagesDir, "oci", "tmp")), images: ls(join(imagesDir, "oci", "images")) };
}

function buildImages() {
  const busybox = findExecutable("busybox")!;
  b = new ImageBuilder(join(dir, "layout"), join(dir, "work"));
  b.create("v1")
    .layer("v1", (root) => {
      for (const d of ["bin", "etc", "app", "opq", "home/app", "usr/bin"]) mkdirSync(join(root, d), { recursive: true });
      copyFileSync(busybox, join(root, "bin/busybox"));
      chmodSync(join(root, "bin/busybox"), 0o755);
      symlinkSync("busybox", join(root, "bin/sh"));
      writeFileSync(join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n");
      writeFileSync(join(root, "etc/deleteme"), "deleted by the second layer\n");
      writeFileSync(join(root, "opq/a"), "a\n");
      writeFileSync(join(root, "opq/b"), "b\n");
    })
    .layer("v1", (root) => {
      rmSync(join(root, "etc/deleteme")); // a .wh.deleteme whiteout
      copyFileSync(busybox, join(root, "usr/bin/suidtool"));
      chmodSync(join(root, "usr/bin/suidtool"), 0o4755);
      writeFileSync(join(root, "home/app/owned"), "mine\n");
      chownSync(join(root, "home/app/owned"), 1000, 1000);
    });
  // A third layer that empties /opq with an opaque whiteout (umoci repack writes per-file ones only).
  const opaque = join(dir, "opaque");
  mkdirSync(join(opaque, "opq"), { recursive: true });
  writeFileSync(join(opaque, "opq/.wh..wh..opq"), "");
  writeFileSync(join(opaque, "opq/c"), "c\n");
  b.rawLayer("v1", opaque).config("v1", { env: ["PATH=/usr/bin:/bin", "GREETING=hello world"], workdir: "/app", user: "app", entrypoint: ["/bin/sh", "-c"], cmd: ["echo $GREETING"] });
  b.push("v1", `${authReg.host}/team/app:v1`, `${USER.username}:${USER.password}`);
  b.push("v1", `${authReg.host}/team/app:zstd`, `${USER.username}:${USER.password}`, ["--dest-compress-format", "zstd"]);

  // Multi-arch: an index with amd64 and arm64 images, and one with arm64 only.
  b.create("amd64").layer("amd64", (root) => writeFileSync(join(root, "arch"), "amd64\n"));
  b.create("arm64").layer("arm64", (root) => writeFileSync(join(root, "arch"), "arm64\n")).config("arm64", { architecture: "arm64" });
  b.index("multi", [
    { tag: "arm64", architecture: "arm64" },
    { tag: "amd64", architecture: "amd64" },
  ]);
  b.index("armonly", [{ tag: "arm64", architecture: "arm64" }]);
  b.push("multi", `${openReg.host}/team/multi:1`).push("armonly", `${openReg.host}/team/armonly:1`).push("arm64", `${openReg.host}/team/arm64:1`);

  // A musl-linked program and musl's loader, no /bin/sh (what alpine-based and distroless images look like to a runtime).
  if (!findExecutable("musl-gcc")) {
    musl = ensureTestTools({ "musl-gcc": "musl-tools" });
    if (!findExecutable("musl-gcc")) musl ??= "needs musl-tools";
  }
  const loader = "/lib/x86_64-linux-musl/libc.so";
  if (!musl && existsSync(loader)) {
    writeFileSync(join(dir, "hello.c"), '#include <stdio.h>\nint main(void) { puts("hello from musl"); return 0; }\n');
    const cc = spawnSync("musl-gcc", ["-o", join(dir, "hello"), join(dir, "hello.c")], { encoding: "utf8" });
    if (cc.status !== 0) musl = `musl-gcc failed: ${cc.stderr}`;
    else {
      b.create("musl").layer("musl", (root) => {
        mkdirSync(join(root, "lib"));
        copyFileSync(loader, join(root, "lib/ld-musl-x86_64.so.1"));
        copyFileSync(join(dir, "hello"), join(root, "hello"));
        chmodSync(join(root, "hello"), 0o755);
      });
      b.config("musl", { cmd: ["/hello"] }).push("musl", `${openReg.host}/small/hello:1`);
    }
  } else musl ??= `no ${loader}`;
}

describe.skipIf(missing !== undefined)(`pullImage from registries on loopback${why}`, () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "locale2b-oci-pull-"));
    authReg = await startRegistry(join(dir, "auth-registry"), { [USER.username]: USER.password, _json_key: GCP_KEY });
    openReg = await startRegistry(join(dir, "open-registry"));
    settings = { mirrors: {}, mirrorsOnly: false, insecure: [authReg.host, openReg.host], ecrEndpoint: "http://127.0.0.1:9/unused", maxBytes: 1024 ** 3, timeoutMs: 120_000 };
    buildImages();
  });

  afterAll(async () => {
    await authReg?.stop();
    await openReg?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("pulls with the right credentials: layers in order, whiteouts applied, setuid and owners kept, the config returned", async () => {
    const imagesDir = fresh("layers");
    const r = await pull({ ref: `${authReg.host}/team/app:v1`, imagesDir, auth: { type: "registry", ...USER } });
    expect(r.cached).toBe(false);
    expect(r.source).toBe(authReg.host);
    expect(r.digest).toMatch(/^sha256:[a-f0-9]{64}$/);
    expect(r.config).toEqual({ env: { PATH: "/usr/bin:/bin", GREETING: "hello world" }, workdir: "/app", user: "app", entrypoint: ["/bin/sh", "-c"], cmd: ["echo $GREETING"] });
    const root = r.rootfsDir;
    expect(existsSync(join(root, "etc/deleteme"))).toBe(false); // .wh.deleteme
    expect(readFileSync(join(root, "etc/passwd"), "utf8")).toContain("app:x:1000");
    expect(readdirSync(join(root, "opq"))).toEqual(["c"]); // .wh..wh..opq emptied it first
    const suid = statSync(join(root, "usr/bin/suidtool"));
    expect(suid.mode & 0o7777).toBe(0o4755);
    expect([suid.uid, suid.gid]).toEqual([0, 0]);
    const owned = statSync(join(root, "home/app/owned"));
    expect([owned.uid, owned.gid]).toEqual([1000, 1000]);
    expect(lstatSync(join(root, "bin/sh")).isSymbolicLink()).toBe(true);
    // The root works: its own shell runs in it.
    const sh = spawnSync("chroot", [root, "/bin/sh", "-c", "echo ok from $(busybox cat /opq/c)"], { encoding: "utf8" });
    expect(sh.stdout).toBe("ok from c\n");
    expect(leftovers(imagesDir).tmp).toEqual([]);
  });

  it("without credentials: refused, and the message says credentials are needed", async () => {
    const imagesDir = fresh("no-creds");
    const err = await pullError({ ref: `${authReg.host}/team/app:v1`, imagesDir });
    expect(err.code).toBe("unauthorized");
    expect(err.message).toContain(`registry ${authReg.host} refused access to ${authReg.host}/team/app:v1 without credentials`);
    expect(err.message).toMatch(/give fromImageRegistry credentials/);
    expect(leftovers(imagesDir)).toEqual({ tmp: [], images: [] });
  });

  it("a wrong password: refused credentials, nothing left behind, and the password in no message", async () => {
    const imagesDir = fresh("wrong-password");
    const err = await pullError({ ref: `${authReg.host}/team/app:v1`, imagesDir, auth: { type: "registry", username: USER.username, password: "not-it-123" } });
    expect(err.code).toBe("unauthorized");
    expect(err.message).toContain(`registry ${authReg.host} refused the credentials for ${authReg.host}/team/app:v1`);
    expect(err.message).not.toContain("not-it-123");
    expect(leftovers(imagesDir)).toEqual({ tmp: [], images: [] });
  });

  it("a missing tag, and a missing repository: not found, naming the image and the registry", async () => {
    const imagesDir = fresh("missing");
    const tag = await pullError({ ref: `${authReg.host}/team/app:nope`, imagesDir, auth: { type: "registry", ...USER } });
    expect(tag.code).toBe("not_found");
    expect(tag.message).toContain(`image ${authReg.host}/team/app:nope not found in registry ${authReg.host}`);
    const repo = await pullError({ ref: `${openReg.host}/nobody/here:1`, imagesDir });
    expect(repo.code).toBe("not_found");
    expect(repo.message).toContain(`image ${openReg.host}/nobody/here:1 not found in registry ${openReg.host}`);
    expect(leftovers(imagesDir)).toEqual({ tmp: [], images: [] });
  });

  it("a private image in the cache is no way around the registry: by digest without credentials is refused, with them it is the cached copy", async () => {
    const imagesDir = fresh("private-cache");
    const auth = { type: "registry", ...USER };
    const first = await pull({ ref: `${authReg.host}/team/app:v1`, imagesDir, auth });
    const byDigest = `${authReg.host}/team/app@${first.digest}`;
    const refused = await pullError({ ref: byDigest, imagesDir });
    expect(refused.code).toBe("unauthorized");
    // Nor under another name: the open registry has no such image.
    expect((await pullError({ ref: `${openReg.host}/any/name@${first.digest}`, imagesDir })).code).toBe("not_found");
    expect(await pull({ ref: byDigest, imagesDir, auth })).toEqual({ ...first, cached: true });
  });

  it("GCP's form: user _json_key, the service account JSON as the password", async () => {
    // bcrypt (the registry's htpasswd) compares the first 72 bytes only; test/images/oci-units.test.ts checks the whole password.
    const r = await pull({ ref: `${authReg.host}/team/app:v1`, imagesDir: fresh("gcp"), auth: { type: "gcp", serviceAccountJson: GCP_KEY } });
    expect(r.config.user).toBe("app");
  });

  it("bad input: a malformed ref or credentials shape fails before any registry is asked", async () => {
    const imagesDir = fresh("bad-input");
    const before = authReg.requests().length;
    const ref = await pullError({ ref: "Python:3.12", imagesDir });
    expect(ref.code).toBe("invalid");
    expect((await pullError({ ref: `${authReg.host}/team/app:v1`, imagesDir, auth: { type: "registry", username: "alice" } })).message).toContain("needs password");
    expect((await pullError({ ref: `${authReg.host}/team/app:v1`, imagesDir, auth: { type: "azure" } })).message).toContain('type "azure" is not one of registry, aws, gcp');
    expect(authReg.requests().length).toBe(before);
    expect(leftovers(imagesDir)).toEqual({ tmp: [], images: [] });
  });

  it("a musl-based image without /bin/sh unpacks into a root its own program runs in", async (ctx) => {
    if (musl) ctx.skip(musl);
    const r = await pull({ ref: `${openReg.host}/small/hello:1`, imagesDir: fresh("musl") });
    expect(existsSync(join(r.rootfsDir, "bin/sh"))).toBe(false);
    expect(r.config.cmd).toEqual(["/hello"]);
    const run = spawnSync("chroot", [r.rootfsDir, "/hello"], { encoding: "utf8" });
    expect(run.stdout).toBe("hello from musl\n");
  });

  it("multi-arch: linux/amd64 is taken from an index; an image without it is refused, naming what it has", async () => {
    const imagesDir = fresh("multi");
    const r = await pull({ ref: `${openReg.host}/team/multi:1`, imagesDir });
    expect(readFileSync(join(r.rootfsDir, "arch"), "utf8")).toBe("amd64\n");
    const armOnly = await pullError({ ref: `${openReg.host}/team/armonly:1`, imagesDir });
    expect(armOnly.code).toBe("platform");
    expect(armOnly.message).toContain("has no linux/amd64 variant (it has linux/arm64)");
    const arm = await pullError({ ref: `${openReg.host}/team/arm64:1`, imagesDir });
    expect(arm.code).toBe("platform");
    expect(arm.message).toContain("is for linux/arm64: only linux/amd64 images run here");
    expect(leftovers(imagesDir).tmp).toEqual([]);
  });

  it("zstd-compressed layers (which umoci 0.4 cannot read) are recompressed and unpack the same", async () => {
    const r = await pull({ ref: `${authReg.host}/team/app:zstd`, imagesDir: fresh("zstd"), auth: { type: "registry", ...USER } });
    expect(readdirSync(join(r.rootfsDir, "opq"))).toEqual(["c"]);
    expect(existsSync(join(r.rootfsDir, "etc/deleteme"))).toBe(false);
    expect(statSync(join(r.rootfsDir, "usr/bin/suidtool")).mode & 0o7777).toBe(0o4755);
  });

  it("the cache: a second pull by tag fetches no layer; by digest it needs no registry at all", async () => {
    const imagesDir = fresh("cache");
    const reg = await startRegistry(join(dir, "cache-registry"));
    try {
      b.push("v1", `${reg.host}/team/app:v1`);
      const s = { ...settings, insecure: [reg.host] };
      // The registry logs a request once it has answered it: the counts are polled for, not read once.
      const gets = (what: string) => reg.requests().filter((r) => r.startsWith(`GET /v2/team/app/${what}/`));
      await expect.poll(() => reg.requests()).toContain("PUT /v2/team/app/manifests/v1");
      const first = await pull({ ref: `${reg.host}/team/app:v1`, imagesDir, settings: s });
      expect(first.cached).toBe(false);
      await expect.poll(() => gets("blobs").length).toBe(4); // 3 layers + the config
      await expect.poll(() => gets("manifests")).toEqual(["GET /v2/team/app/manifests/v1", `GET /v2/team/app/manifests/${first.digest}`]);
      const second = await pull({ ref: `${reg.host}/team/app:v1`, imagesDir, settings: s });
      expect(second).toEqual({ ...first, cached: true });
      // Its one request: the tag's manifest (does v1 still name this image?). No blob.
      await expect.poll(() => gets("manifests").length).toBe(3);
      expect(gets("manifests")[2]).toBe("GET /v2/team/app/manifests/v1");
      expect(gets("blobs").length).toBe(4);
      await reg.stop();
      const byDigest = await pull({ ref: `${reg.host}/team/app@${first.digest}`, imagesDir, settings: s });
      expect(byDigest).toEqual({ ...first, cached: true });
      // By tag the registry is asked (the tag may have moved): stopped, it says so.
      const byTag = await pullError({ ref: `${reg.host}/team/app:v1`, imagesDir, settings: s });
      expect(byTag.code).toBe("unreachable");
      expect(byTag.message).toContain(`cannot reach registry ${reg.host}`);
    } finally {
      await reg.stop();
    }
  });

  it("two pulls of one image at once: both get the same complete root, one copy kept", async () => {
    const imagesDir = fresh("concurrent");
    const ref = `${authReg.host}/team/app:v1`;
    const auth = { type: "registry", ...USER };
    const [a, c] = await Promise.all([pull({ ref, imagesDir, auth }), pull({ ref, imagesDir, auth })]);
    expect(a.rootfsDir).toBe(c.rootfsDir);
    expect(readdirSync(join(a.rootfsDir, "opq"))).toEqual(["c"]);
    expect(leftovers(imagesDir)).toEqual({ tmp: [], images: [a.digest.slice("sha256:".length)] });
  });

  it("limits: an image over the size limit, a pull over its time limit, a cancelled pull: clear errors, nothing left", async () => {
    const imagesDir = fresh("limits");
    const ref = `${authReg.host}/team/app:v1`;
    const auth = { type: "registry", ...USER };
    const big = await pullError({ ref, imagesDir, auth, settings: { ...settings, maxBytes: 1024 * 1024 } });
    expect(big.code).toBe("too_large");
    expect(big.message).toMatch(/over the 1 MiB limit \(LOCALE2B_IMAGE_PULL_MAX_MB\)/);
    // Compressed it fits, unpacked it does not: stopped while measuring, before anything is written.
    const unpacked = await pullError({ ref, imagesDir, auth, settings: { ...settings, maxBytes: 3 * 1024 * 1024 } });
    expect(unpacked.code).toBe("too_large");
    expect(unpacked.message).toMatch(/unpacks to more than \d+ MiB/);
    const slow = await pullError({ ref, imagesDir, auth, settings: { ...settings, timeoutMs: 1 } });
    expect(slow.code).toBe("timeout");
    expect(slow.message).toContain("LOCALE2B_IMAGE_PULL_TIMEOUT_S");
    // Cancelled while skopeo is copying (at its first line of output): it is killed, its work folder removed.
    const ac = new AbortController();
    const lines: string[] = [];
    const watching = pino({ level: "debug" }, { write: (line: string) => (lines.push(line), line.includes('"tool":"skopeo"') && ac.abort()) });
    const cancelled = await pullError({ ref, imagesDir, auth, signal: ac.signal, log: watching });
    expect(cancelled.code).toBe("cancelled");
    expect(cancelled.message).toBe(`pulling ${ref} was cancelled`);
    expect(lines.some((l) => l.includes("Copying blob"))).toBe(true);
    expect(leftovers(imagesDir)).toEqual({ tmp: [], images: [] });
  });
});
