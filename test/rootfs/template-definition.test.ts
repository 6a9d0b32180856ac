// Template definitions (rootfs/templates/*.yaml) and the hashes that key
// their images: what is parsed, what is refused and how, what goes into each
// hash. Building from them: template.test.ts.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { templateHash } from "../../control-plane/images/template-build.js";
import { layerHash, loadDefinition, parseDefinition, templateInputs } from "../../control-plane/images/template-definition.js";
import { err, F, makeCert, openssl, parse } from "../helpers/template-defs.js";

const scratch = mkdtempSync(join(tmpdir(), "locale2b-template-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("template definitions", () => {
  it("parses rootfs/templates/base.yaml with defaults", () => {
    const def = loadDefinition("base", {});
    expect(def).toMatchObject({ name: "base", release: "bookworm", variant: "minbase", mirror: "http://deb.debian.org/debian", user: "user" });
    expect(def.packages).toEqual(expect.arrayContaining(["python3", "git", "curl", "ca-certificates", "libstdc++6"]));
    // E2B's base image has passwordless sudo for its user: ours too.
    expect(def.packages).toContain("sudo");
    expect(def.files.map((f) => f.path)).toContain("/etc/sudoers.d/user");
    expect(def.diskSizeMB).toBeGreaterThanOrEqual(512);
    // What E2B's base has: pip, a compiler, Node with npm and yarn (pinned).
    expect(def.packages).toEqual(expect.arrayContaining(["python3-pip", "python3-venv", "build-essential", "jq", "iputils-ping", "iproute2"]));
    expect(def.node?.packages.map((p) => p.name)).toEqual(["npm", "yarn"]);
    for (const p of def.node!.packages) expect(p.version).toMatch(/^\d+\.\d+\.\d+$/);
    const minimal = parse("packages: [git]\n");
    expect(minimal).toMatchObject({ name: "demo", release: "bookworm", variant: "minbase", diskSizeMB: 1024, user: "user", run: [], files: [] });
    expect(minimal.node).toBeUndefined();
  });

  it("takes node: {packages: [name@x.y.z]} for the user's Node, exact versions only", () => {
    expect(parse("node: {}\n").node).toEqual({ packages: [] });
    expect(parse("node:\n  packages: [npm@10.9.9, '@scope/tool-x@1.2.3-beta.1']\n").node).toEqual({
      packages: [
        { name: "npm", version: "10.9.9", spec: "npm@10.9.9" },
        { name: "@scope/tool-x", version: "1.2.3-beta.1", spec: "@scope/tool-x@1.2.3-beta.1" },
      ],
    });
    expect(err("node: true\n")).toMatch(/'node': expected a mapping \{packages: \[name@version, \.\.\.\]\}/);
    expect(err("node:\n  version: 22\n")).toMatch(/unknown key 'node\.version'; known keys: packages/);
    expect(err("node:\n  packages: npm\n")).toMatch(/'node\.packages': expected a list of npm packages at exact versions/);
    for (const bad of ["npm", "npm@10", "npm@^10.9.9", "npm@latest", "../x@1.0.0", "Npm@1.0.0"]) {
      expect(err(`node:\n  packages: ['${bad}']\n`), bad).toMatch(/'node\.packages\[0\]': expected an npm package at an exact version, such as npm@10\.9\.9/);
    }
    expect(err("node:\n  packages: [yarn@1.22.22, yarn@1.22.21]\n")).toMatch(/'node\.packages\[1\]': expected each package once \(yarn is listed twice\)/);
  });

  it("names the file, the key and what was expected", () => {
    expect(err("pakages: [git]\n")).toBe(`${F}: unknown key 'pakages' (did you mean 'packages'?); known keys: description, release, variant, mirror, packages, run, files, diskSizeMB, user, runtime, node, start, ready`);
    expect(err("packages: git\n")).toBe(`${F}: 'packages': expected a list of Debian package names, got the string "git"`);
    expect(err("packages: [git, Foo_Bar]\n")).toMatch(/'packages\[1\]': expected a Debian package name .*got the string "Foo_Bar"/);
    expect(err("run: [ls, 3]\n")).toMatch(/^\/defs\/demo\.yaml: 'run\[1\]': expected a shell command .*got number 3$/);
    expect(err("diskSizeMB: 1.5G\n")).toMatch(/'diskSizeMB': expected a whole number of MiB from 64 to 1048576, got the string "1.5G"/);
    expect(err("variant: tiny\n")).toMatch(/'variant': expected one of minbase, buildd, default, got the string "tiny"/);
    expect(err("mirror: ftp.debian.org\n")).toMatch(/'mirror': expected an http:\/\/ or https:\/\/ URL/);
    expect(err("user: root\n")).toMatch(/'user': expected a user other than root/);
    expect(err("runtime: docker\n")).toMatch(/'runtime': expected one of process, gvisor, qemu, firecracker, got the string "docker"/);
    expect(err("files:\n  - path: etc/x\n    content: hi\n")).toMatch(/'files\[0\]\.path': expected an absolute path inside the guest/);
    expect(err("files:\n  - path: /etc/x\n")).toMatch(/'files\[0\]': expected exactly one of 'content' or 'from'/);
    expect(err("files:\n  - path: /etc/x\n    content: hi\n    owner: 1000\n")).toMatch(/unknown key 'files\[0\]\.owner'/);
    expect(err("files:\n  - path: /etc/x\n    content: hi\n    mode: 999\n")).toMatch(/'files\[0\]\.mode': expected an octal file mode/);
    expect(err("- git\n")).toMatch(/expected a mapping of keys .*got a list/);
    expect(err("packages: [git\n")).toMatch(/^\/defs\/demo\.yaml: YAML error: /);
    expect(err("run: [a]\nrun: [b]\n")).toMatch(/YAML error: .*unique/i);
    expect(() => parseDefinition("{}", "/defs/Bad Name.yaml", {})).toThrow(/template name 'Bad Name'/);
  });

  it("takes E2B's start and ready commands (a ready command only with a start command); they change the template's hash", () => {
    const def = parse("start: python3 -m http.server 8000\nready: curl -sf http://127.0.0.1:8000/\n");
    expect(def.start).toBe("python3 -m http.server 8000");
    expect(def.ready).toBe("curl -sf http://127.0.0.1:8000/");
    expect(() => parse("ready: 'true'\n")).toThrow(/'ready': expected a ready command only with a start command/);
    expect(() => parse("start: [a]\n")).toThrow(/'start': expected a string/);
    const without = parse("{}\n");
    expect(JSON.stringify(templateInputs(def))).not.toBe(JSON.stringify(templateInputs(without)));
  });

  it("reads file modes as octal, quoted or not", () => {
    const def = parse('files:\n  - {path: /a, content: x, mode: 755}\n  - {path: /b, content: x, mode: "0600"}\n  - {path: /c, content: x}\n');
    expect(def.files.map((f) => f.mode)).toEqual([0o755, 0o600, 0o644]);
  });

  it("lets LOCALE2B_DEBIAN_MIRROR override where packages come from, not what the image says", () => {
    const plain = parse("packages: [git]\n");
    const local = parse("packages: [git]\n", { LOCALE2B_DEBIAN_MIRROR: "http://127.0.0.1:3142/debian" });
    expect(local.buildMirror).toBe("http://127.0.0.1:3142/debian");
    expect(local.mirror).toBe("http://deb.debian.org/debian");
    expect(layerHash(local)).toBe(layerHash(plain));
    expect(() => parse("{}", { LOCALE2B_DEBIAN_MIRROR: "nope" })).toThrow(/LOCALE2B_DEBIAN_MIRROR: expected/);
  });
});

describe("template hashes", () => {
  it("are stable, ignore package order and duplicates, and change with what goes into the layer", () => {
    const a = layerHash(parse("packages: [git, curl]\nrun: [echo hi]\n"));
    expect(layerHash(parse("packages: [git, curl]\nrun: [echo hi]\n"))).toBe(a);
    expect(layerHash(parse("packages: [curl, git, git]\nrun: [echo hi]\n"))).toBe(a);
    expect(layerHash(parse("# a comment\npackages:\n  - curl\n  - git\nrun:\n  - echo hi\ndiskSizeMB: 4096\n"))).toBe(a); // disk size: not the layer's
    expect(layerHash(parse("packages: [git, curl, jq]\nrun: [echo hi]\n"))).not.toBe(a);
    expect(layerHash(parse("packages: [git, curl]\nrun: [echo bye]\n"))).not.toBe(a);
    expect(layerHash(parse("packages: [git, curl]\nrun: [echo hi]\nrelease: trixie\n"))).not.toBe(a);
    expect(a).toMatch(/^[0-9a-f]{64}$/);
  });

  it("the template hash covers the layer, Node, the envd bundle, envd's runtime, the init, the npm tarballs and the files", () => {
    const parts = { layerHash: "a", nodeSha256: "n", envdBundle: "e", guestRuntime: "r", initSha256: "i", template: { files: [] } };
    const h = templateHash(parts);
    expect(templateHash({ ...parts })).toBe(h);
    for (const k of ["layerHash", "nodeSha256", "envdBundle", "guestRuntime", "initSha256"] as const) expect(templateHash({ ...parts, [k]: "x" })).not.toBe(h);
    expect(templateHash({ ...parts, template: { files: [{ path: "/x" }] } })).not.toBe(h);
    expect(templateHash({ ...parts, npmTarballs: ["npm@10.9.9 abc"] })).not.toBe(h);
    expect(templateHash({ ...parts, npmTarballs: ["npm@10.9.9 abd"] })).not.toBe(templateHash({ ...parts, npmTarballs: ["npm@10.9.9 abc"] }));
    // node: is the template's, not the layer's: a new npm version reassembles, it does not debootstrap again.
    const withNode = parse("packages: [git]\nnode:\n  packages: [npm@10.9.9]\n");
    expect(layerHash(withNode)).toBe(layerHash(parse("packages: [git]\n")));
    expect(templateInputs(withNode)).toMatchObject({ node: { packages: ["npm@10.9.9"] } });
    expect(templateInputs(parse("packages: [git]\nnode:\n  packages: [npm@10.9.8]\n"))).not.toEqual(templateInputs(withNode));
  });

  it("the layer hash covers the build host's local CAs (when there are any), by content", () => {
    const cas = join(scratch, "hash-cas");
    mkdirSync(cas);
    const none = layerHash(parse("packages: [git]\n", { LOCALE2B_IMAGE_CA_DIR: cas }));
    expect(layerHash(parse("packages: [git]\n", { LOCALE2B_IMAGE_CA_DIR: "none" }))).toBe(none);
    if (!openssl) return;
    writeFileSync(join(cas, "a.crt"), makeCert(scratch, "hash-a"));
    const one = layerHash(parse("packages: [git]\n", { LOCALE2B_IMAGE_CA_DIR: cas }));
    expect(one).not.toBe(none);
    writeFileSync(join(cas, "a.crt"), makeCert(scratch, "hash-b"));
    expect(layerHash(parse("packages: [git]\n", { LOCALE2B_IMAGE_CA_DIR: cas }))).not.toBe(one);
  });
});
