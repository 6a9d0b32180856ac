// Building templates: the building blocks (guest files, the user's Node, npm
// tarballs, the build lock), the CLI, and a full `template build base` into
// the CI image cache (skipped, saying why, without root or debootstrap).
// Definitions and hashes: template-definition.test.ts.
import { spawnSync } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GUEST } from "../../control-plane/images/layout.js";
import { buildTemplate } from "../../control-plane/images/template-build.js";
import { LOCAL_CA_DIR, localCADir, readLocalCAs } from "../../control-plane/images/local-cas.js";
import { ensureNpmTarballs, npmTarballPath } from "../../control-plane/images/npm-tarballs.js";
import { installUserNode } from "../../control-plane/images/template-node.js";
import { findExecutable } from "../../control-plane/host/executables.js";
import { guestPath, writeGuestFile } from "../../control-plane/images/template-fs.js";
import { acquireLock } from "../../control-plane/images/template-store.js";
import { CLI, runCli } from "../helpers/cli.js";
import { err, makeCert, openssl, parse } from "../helpers/template-defs.js";

const scratch = mkdtempSync(join(tmpdir(), "locale2b-template-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("building blocks", () => {
  it("writes files inside the tree, never through its symlinks", async () => {
    const root = join(scratch, "tree");
    mkdirSync(join(root, "usr", "sbin"), { recursive: true });
    mkdirSync(join(root, "etc"), { recursive: true });
    symlinkSync("usr/sbin", join(root, "sbin"));
    const outside = join(scratch, "outside");
    mkdirSync(outside);
    symlinkSync(outside, join(root, "etc", "escape")); // absolute: means <root>/<outside> inside the guest
    symlinkSync("/etc/shadow-host", join(root, "etc", "leaf"));
    expect(await guestPath(root, "/sbin/locale2b-init")).toBe(join(root, "usr", "sbin", "locale2b-init"));
    await writeGuestFile(root, "/etc/escape/x", { content: "in", mode: 0o600 });
    expect(existsSync(join(outside, "x"))).toBe(false);
    expect(readFileSync(join(root, outside, "x"), "utf8")).toBe("in");
    await writeGuestFile(root, "/etc/leaf", { content: "replaced", mode: 0o644 }); // the link is replaced, not followed
    expect(readFileSync(join(root, "etc", "leaf"), "utf8")).toBe("replaced");
    expect(statSync(join(root, "etc", "leaf")).mode & 0o777).toBe(0o644);
  });

  it.skipIf(!openssl)("takes only certificates from the CA folder: no key (not even in the same file), no other file, nothing a link points to", () => {
    const dir = join(scratch, "cas");
    mkdirSync(join(dir, "corp"), { recursive: true });
    const a = makeCert(scratch, "ca-a");
    const b = makeCert(scratch, "ca-b");
    writeFileSync(join(dir, "a.crt"), a);
    writeFileSync(join(dir, "with-key.crt"), readFileSync(join(scratch, "ca-b.key"), "utf8") + b);
    writeFileSync(join(dir, "corp", "c.crt"), makeCert(scratch, "ca-c"));
    writeFileSync(join(dir, "notes.txt"), a); // not *.crt: update-ca-certificates ignores it, so do we
    const secret = join(scratch, "host-secret");
    writeFileSync(secret, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n");
    symlinkSync(secret, join(dir, "link-to-secret.crt"));
    symlinkSync("/etc/shadow", join(dir, "shadow.crt"));
    symlinkSync(join(scratch, "nowhere"), join(dir, "broken.crt"));
    writeFileSync(join(dir, "garbage.crt"), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    const r = readLocalCAs(dir);
    expect(r.cas.map((c) => c.path)).toEqual(["a.crt", "corp/c.crt", "with-key.crt"]);
    expect(r.skipped.filter((x) => !x.startsWith("shadow.crt:"))).toEqual(["broken.crt: a broken link", "garbage.crt: no PEM certificate in it", "link-to-secret.crt: no PEM certificate in it"]);
    expect(r.skipped.find((x) => x.startsWith("shadow.crt:"))).toMatch(/no PEM certificate in it|EACCES/);
    // What goes into an image is the certificates, re-encoded: nothing else of any file.
    for (const c of r.cas) expect(c.pem).toMatch(/^(-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+-----END CERTIFICATE-----\n)+$/);
    expect(r.cas.map((c) => c.pem).join("")).not.toMatch(/PRIVATE KEY|c2VjcmV0/);
    expect(r.cas.find((c) => c.path === "with-key.crt")!.pem).toBe(new X509Certificate(b).toString());
    expect(readLocalCAs(undefined)).toEqual({ cas: [], skipped: [] });
    expect(readLocalCAs(join(scratch, "no-such-dir")).cas).toEqual([]);
    expect(localCADir({})).toBe(LOCAL_CA_DIR);
    expect(localCADir({ LOCALE2B_IMAGE_CA_DIR: "none" })).toBeUndefined();
    expect(localCADir({ LOCALE2B_IMAGE_CA_DIR: dir })).toBe(dir);
  });

  it("installs the user's Node and self-contained npm packages as npm install -g would; refuses what it cannot install safely", async () => {
    const root = join(scratch, "node-root");
    mkdirSync(join(root, "usr", "local", "bin"), { recursive: true });
    const fakeNode = join(scratch, "fake-node");
    writeFileSync(fakeNode, "#!/bin/sh\necho v0\n");
    const tarball = (name: string, files: Record<string, string>, links: Record<string, string> = {}) => {
      const dir = mkdtempSync(join(scratch, "pkg-"));
      for (const [p, body] of Object.entries(files)) {
        mkdirSync(join(dir, "package", p, ".."), { recursive: true });
        writeFileSync(join(dir, "package", p), body);
      }
      for (const [p, target] of Object.entries(links)) symlinkSync(target, join(dir, "package", p));
      const file = join(scratch, `${name}.tgz`);
      expect(spawnSync("tar", ["-czf", file, "-C", dir, "package"]).status).toBe(0);
      const pj = JSON.parse(files["package.json"]!) as { name: string; version: string };
      return { name: pj.name, version: pj.version, spec: `${pj.name}@${pj.version}`, file, sha256: "", cached: true };
    };
    const good = tarball("good", {
      "package.json": JSON.stringify({ name: "@demo/tiny", version: "1.0.0", bin: { tiny: "./bin/tiny.js" }, dependencies: { dep: "^1.0.0" } }),
      "bin/tiny.js": "#!/usr/bin/env node\n",
      "node_modules/dep/package.json": JSON.stringify({ name: "dep", version: "1.2.0" }),
    });
    const bins = await installUserNode(root, fakeNode, [good], join(scratch, "node-work-1"));
    expect(bins).toEqual(["tiny"]);
    expect(readFileSync(join(root, "usr/local/bin/node"), "utf8")).toContain("echo v0");
    expect(readlinkSync(join(root, "usr/local/bin/nodejs"))).toBe("node");
    expect(readlinkSync(join(root, "usr/local/bin/tiny"))).toBe("../lib/node_modules/@demo/tiny/bin/tiny.js");
    expect(statSync(join(root, "usr/local/lib/node_modules/@demo/tiny/bin/tiny.js")).mode & 0o777).toBe(0o755);
    expect(existsSync(join(root, "usr/local/lib/node_modules/@demo/tiny/node_modules/dep/package.json"))).toBe(true);

    const refused = async (t: ReturnType<typeof tarball>) => (await installUserNode(root, fakeNode, [t], mkdtempSync(join(scratch, "node-work-"))).then(() => "installed", (e: Error) => e.message));
    const unbundled = tarball("unbundled", { "package.json": JSON.stringify({ name: "needs-deps", version: "2.0.0", dependencies: { "left-pad": "^1", dep: "^1" } }) });
    expect(await refused(unbundled)).toMatch(/install needs-deps@2\.0\.0 for the user's Node failed: it depends on left-pad, dep, not bundled in its tarball: node\.packages takes self-contained packages only/);
    const outside = tarball("outside", { "package.json": JSON.stringify({ name: "outside", version: "1.0.0", bin: { evil: "../../../../etc/passwd" } }) });
    expect(await refused(outside)).toMatch(/its bin entry "evil": "\.\.\/\.\.\/\.\.\/\.\.\/etc\/passwd" points outside the package/);
    // A bin that is a link (here to a host file): never made executable through it.
    const hostFile = join(scratch, "host-file");
    writeFileSync(hostFile, "host\n", { mode: 0o600 });
    const linked = tarball("linked", { "package.json": JSON.stringify({ name: "linked", version: "1.0.0", bin: { x: "bin/x" } }), "bin/.keep": "" }, { "bin/x": hostFile });
    expect(await refused(linked)).toMatch(/its bin entry "x": bin\/x is not a file in the package/);
    expect(statSync(hostFile).mode & 0o777).toBe(0o600);
    const wrong = tarball("wrong", { "package.json": JSON.stringify({ name: "other", version: "9.9.9" }) });
    expect(await refused({ ...wrong, name: "asked", version: "1.0.0", spec: "asked@1.0.0" })).toMatch(/the tarball is other@9\.9\.9/);
    expect(existsSync(join(root, "usr/local/bin/evil"))).toBe(false);
  });

  it("fetches node.packages with npm pack from the configured registry once, checks what came, and takes a tarball put in place by hand", async () => {
    const images = join(scratch, "npm-images");
    const pkgDir = mkdtempSync(join(scratch, "reg-"));
    const tgz = (version: string) => {
      rmSync(join(pkgDir, "package"), { recursive: true, force: true });
      mkdirSync(join(pkgDir, "package"));
      writeFileSync(join(pkgDir, "package", "package.json"), JSON.stringify({ name: "tiny-reg", version }));
      return spawnSync("tar", ["-czf", "-", "-C", pkgDir, "package"]).stdout;
    };
    // A registry on loopback: 1.0.0 is what it says; 2.0.0's tarball holds another version.
    const tarballs: Record<string, Buffer> = { "1.0.0": tgz("1.0.0"), "2.0.0": tgz("2.5.0") };
    let hits = 0;
    const server = createServer((req, res) => {
      hits++;
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      if (req.url === "/tiny-reg") {
        const versions = Object.fromEntries(
          Object.entries(tarballs).map(([v, body]) => [v, { name: "tiny-reg", version: v, dist: { tarball: `${base}/tiny-reg/-/tiny-reg-${v}.tgz`, integrity: `sha512-${createHash("sha512").update(body).digest("base64")}` } }]),
        );
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ name: "tiny-reg", "dist-tags": { latest: "1.0.0" }, versions }));
        return;
      }
      const m = /^\/tiny-reg\/-\/tiny-reg-(.+)\.tgz$/.exec(req.url ?? "");
      if (m && tarballs[m[1]!]) return void res.end(tarballs[m[1]!]);
      res.statusCode = 404;
      res.end("{}");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const env = { ...process.env, npm_config_registry: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, npm_config_cache: join(scratch, "npm-cache") };
      const pkg = { name: "tiny-reg", version: "1.0.0", spec: "tiny-reg@1.0.0" };
      const [first] = await ensureNpmTarballs([pkg], images, { env });
      expect(first).toMatchObject({ cached: false, file: join(images, "npm", "tiny-reg-1.0.0.tgz") });
      expect(first!.sha256).toBe(createHash("sha256").update(tarballs["1.0.0"]!).digest("hex"));
      const before = hits;
      expect((await ensureNpmTarballs([pkg], images, { env }))[0]).toMatchObject({ cached: true, sha256: first!.sha256 });
      expect(hits).toBe(before);
      const err = await ensureNpmTarballs([{ name: "tiny-reg", version: "2.0.0", spec: "tiny-reg@2.0.0" }], images, { env }).then(() => undefined, (e: Error) => e.message);
      expect(err).toMatch(/fetch tiny-reg@2\.0\.0 from the npm registry failed: .*the registry sent tiny-reg@2\.5\.0, not tiny-reg@2\.0\.0/s);
      const missing = await ensureNpmTarballs([{ name: "tiny-reg", version: "3.0.0", spec: "tiny-reg@3.0.0" }], images, { env }).then(() => undefined, (e: Error) => e.message);
      expect(missing).toContain(`or put the package's tarball at ${join(images, "npm", "tiny-reg-3.0.0.tgz")}`);
      expect(readdirSync(join(images, "npm"))).toEqual(["tiny-reg-1.0.0.tgz"]); // nothing half-fetched left
      // Air-gapped: the file put there by hand is used as it is.
      writeFileSync(npmTarballPath(images, { name: "@x/offline", version: "1.0.0", spec: "@x/offline@1.0.0" }), "x");
      expect(npmTarballPath(images, { name: "@x/offline", version: "1.0.0", spec: "" })).toBe(join(images, "npm", "x-offline-1.0.0.tgz"));
      expect((await ensureNpmTarballs([{ name: "@x/offline", version: "1.0.0", spec: "@x/offline@1.0.0" }], images, { env: { PATH: "" } }))[0]!.cached).toBe(true);
    } finally {
      server.close();
    }
  });

  it("serializes builds of one template with a lock", async () => {
    const dir = join(scratch, "locks");
    mkdirSync(dir);
    const release = await acquireLock(dir, "demo");
    let second = false;
    const waiting = acquireLock(dir, "demo").then((r) => {
      second = true;
      return r;
    });
    await new Promise((r) => setTimeout(r, 700));
    expect(second).toBe(false);
    await release();
    await (await waiting)();
    expect(second).toBe(true);
    writeFileSync(join(dir, "dead.lock"), "999999999\n"); // a builder that died
    await (await acquireLock(dir, "dead"))();
  });
});

describe("locale2b template", () => {
  it("explains bad usage and unknown templates", async () => {
    const none = await runCli(["template"]);
    expect(none.code).toBe(2);
    expect(none.stdout).toContain("Usage: locale2b template <command>");
    const noName = await runCli(["template", "build"]);
    expect(noName.code).toBe(2);
    expect(noName.stderr).toContain("build takes one template");
    const unknown = await runCli(["template", "build", "nosuch"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no template 'nosuch': .*rootfs\/templates\/nosuch\.yaml does not exist/);
    const bad = join(scratch, "bad.yaml");
    writeFileSync(bad, "packages: [git]\nsudo: true\n");
    const invalid = await runCli(["template", "build", bad]);
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toContain(`${bad}: unknown key 'sudo'`);
    const empty = await runCli(["template", "list", "--images-dir", join(scratch, "no-images")]);
    expect(empty.code).toBe(0);
    expect(empty.stdout).toContain("no templates built");
  });
});

const CI_IMAGES = process.env.LOCALE2B_IMAGES_DIR || "/root/.cache/locale2b/images";
const skipReason =
  process.getuid?.() !== 0 ? "not root (debootstrap and chroot need it)" : !findExecutable("debootstrap") ? "debootstrap is missing (scripts/setup-host)" : !findExecutable("mkfs.ext4") ? "mkfs.ext4 is missing" : "";

describe("template build base", () => {
  it.skipIf(skipReason !== "")(`builds the base image into ${CI_IMAGES}, then finds it cached${skipReason ? ` [skipped: ${skipReason}]` : ""}`, { timeout: 10 * 60_000 }, async () => {
    const lines: string[] = [];
    const first = await buildTemplate("base", { imagesDir: CI_IMAGES, log: (l) => lines.push(l), progress: (e) => e.state !== "start" && lines.push(`[${e.index}/${e.total}] ${e.title} ${e.state} ${e.seconds} s`) });
    console.log(`template build base (${first.cached ? "cached" : "built"}) in ${first.seconds.toFixed(1)} s\n${lines.join("\n")}`);
    const root = first.rootfsDir;
    for (const p of [GUEST.init, GUEST.node, GUEST.envd, "/usr/bin/python3", "/usr/bin/git", "/usr/bin/curl"]) expect(existsSync(join(root, p)), p).toBe(true);
    const chroot = (cmd: string) => spawnSync(findExecutable("chroot")!, [root, "/bin/sh", "-c", cmd], { encoding: "utf8", env: { PATH: "/usr/local/bin:/usr/bin:/bin" } });
    expect(chroot(`${GUEST.node} --version`).stdout.trim()).toBe(process.version);
    expect(chroot("python3 -c 'print(6*7)' && git --version && curl --version").status).toBe(0);
    // What E2B's base has (nothing here writes into the image: npm keeps no log with --logs-max=0).
    const tools = chroot("node --version && npm --version --logs-max=0 && test -x /usr/local/bin/yarn && pip --version && gcc --version && make --version && jq --version");
    expect(tools.status, tools.stderr).toBe(0);
    expect(tools.stdout.split("\n")[0]).toBe(process.version);
    // envd's Node is a file of its own: whatever the user does to theirs does not reach it.
    expect(GUEST.node.startsWith("/opt/locale2b/")).toBe(true);
    expect(statSync(join(root, GUEST.node)).ino).not.toBe(statSync(join(root, "usr/local/bin/node")).ino);
    // ... and loads only its own libraries (the image's libc and libstdc++ do not matter to it): patched to its own loader and rpath.
    const patchelf = (flag: string, file: string) => spawnSync("patchelf", [flag, join(root, file)], { encoding: "utf8" }).stdout.trim();
    expect(patchelf("--print-interpreter", GUEST.node)).toBe(`${GUEST.lib}/ld-linux-x86-64.so.2`);
    expect(patchelf("--print-rpath", GUEST.node)).toBe(GUEST.lib);
    for (const lib of ["ld-linux-x86-64.so.2", "libc.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libutil.so.1"]) expect(existsSync(join(root, GUEST.lib, lib)), lib).toBe(true);
    expect(patchelf("--print-rpath", "opt/locale2b/envd/node_modules/@lydell/node-pty-linux-x64/pty.node")).toBe(GUEST.lib);
    // The user's Node is the host's binary, untouched: the image's loader and libraries.
    expect(patchelf("--print-interpreter", "usr/local/bin/node")).toBe("/lib64/ld-linux-x86-64.so.2");
    expect(statSync(join(root, "usr/bin/ping")).mode & 0o4000).toBe(0o4000); // setuid root: the process runtime keeps it, not capabilities
    expect(readdirSync(join(root, "usr/lib")).filter((d) => /^python3/.test(d) && existsSync(join(root, "usr/lib", d, "EXTERNALLY-MANAGED")))).toEqual([]);
    // Exactly the build host's local CA certificates, and trusted (in the system's bundle); no other host file.
    const hostCAs = readLocalCAs(localCADir());
    const caDir = join(root, LOCAL_CA_DIR);
    const inImage = (readdirSync(caDir, { recursive: true }) as string[]).filter((p) => statSync(join(caDir, p)).isFile()).sort();
    expect(inImage).toEqual(hostCAs.cas.map((c) => c.path).sort());
    const bundle = readFileSync(join(root, "etc/ssl/certs/ca-certificates.crt"), "utf8");
    for (const c of hostCAs.cas) {
      expect(readFileSync(join(caDir, c.path), "utf8")).toBe(c.pem);
      expect(bundle).toContain(c.pem.trim());
    }
    const passwd = readFileSync(join(root, "etc/passwd"), "utf8");
    expect(passwd).toMatch(/^user:x:1000:1000::\/home\/user:\/bin\/bash$/m);
    expect(passwd).not.toMatch(/^sudo/m);
    const home = statSync(join(root, GUEST.home));
    expect([home.uid, home.gid]).toEqual([1000, 1000]);
    expect(statSync(join(root, "run/locale2b")).isDirectory()).toBe(true);
    expect(existsSync(join(root, "usr/share/man/man1"))).toBe(false);
    // Empty: the runtime provides DNS (the VM's init from the kernel's ip= set-up, the process runtime the host's).
    expect(readFileSync(join(root, "etc/resolv.conf"), "utf8")).toBe("");

    expect(statSync(first.rootfsImage).size).toBe(first.manifest.imageBytes);
    expect(spawnSync("e2fsck", ["-fn", first.rootfsImage], { encoding: "utf8" }).status).toBe(0);
    const debugfs = spawnSync("debugfs", ["-R", "stat /usr/sbin/locale2b-init", first.rootfsImage], { encoding: "utf8" });
    expect(debugfs.stdout).toMatch(/Mode:\s+0755/);
    expect(readFileSync(join(CI_IMAGES, "templates", "base.current"), "utf8").trim()).toBe(first.id);

    const second = await buildTemplate("base", { imagesDir: CI_IMAGES });
    expect(second.cached).toBe(true);
    expect(second.hash).toBe(first.hash);

    const list = spawnSync(process.execPath, [CLI, "template", "list", "--json", "--images-dir", CI_IMAGES], { encoding: "utf8" });
    expect(list.status).toBe(0);
    expect(JSON.parse(list.stdout)).toEqual(expect.arrayContaining([expect.objectContaining({ name: "base", hash: first.hash, current: true })]));
  });

  it.skipIf(process.getuid?.() !== 0 || !findExecutable("setpriv") || !findExecutable("gcc"))("refuses to build without root, saying why", { timeout: 60_000 }, (ctx) => {
    const nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    if (spawnSync("setpriv", [...nobody, "test", "-r", CLI]).status !== 0) ctx.skip("the checkout is not readable by nobody here");
    const images = mkdtempSync(join(tmpdir(), "locale2b-nobody-images-"));
    try {
      chmodSync(images, 0o777);
      const r = spawnSync("setpriv", [...nobody, process.execPath, CLI, "template", "build", "base", "--images-dir", images], {
        encoding: "utf8",
        env: { PATH: process.env.PATH, HOME: "/tmp" },
      });
      expect(r.stderr).toContain("template build needs root (debootstrap, chroot); run as root or with sudo");
      expect(r.status).toBe(1);
    } finally {
      rmSync(images, { recursive: true, force: true });
    }
  });

  it.skipIf(skipReason !== "")("names the failed step, shows its output and leaves nothing behind", { timeout: 5 * 60_000 }, async () => {
    const images = join(scratch, "fail-images");
    const def = join(scratch, "broken.yaml");
    writeFileSync(def, "release: no-such-release\npackages: [git]\n");
    const err = await buildTemplate(def, { imagesDir: images }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/^debootstrap no-such-release \(minbase \+ 1 packages\): first stage failed: .*debootstrap .* exited 1\n--- last output ---\n/s);
    const leftovers = ["layers", "templates"].flatMap((d) => (existsSync(join(images, d)) ? readdirSync(join(images, d)).filter((n) => n.startsWith(".tmp-") || n.endsWith(".lock")) : []));
    expect(leftovers).toEqual([]);
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(images);
  });
});
