// Ways out through template builds, tried for real: a COPY tar whose members
// are absolute, climb with `..` or go through a symlink they made; build
// steps as `user` and as root writing where the host would see it; and a
// build whose root export is a hostile tar (its steps replaced `tar` inside
// the sandbox with a program writing absolute names, `..`, a symlink and then
// a file through it, device nodes and a setuid file). The host and the server
// stay untouched; what lands is inside the template only; the new image is
// private to root and has no device nodes. Needs root.
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { findTemplateImage, imagesDir as serverImagesDir } from "../../control-plane/images/layout.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const python = spawnSync("python3", ["--version"]).status === 0;
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing ?? (python ? undefined : "needs python3 on the host (to write the hostile tar)");

let cp: TestControlPlane;
let restoreEnv = () => {};
let work = "";
const marker = `l2b-escape-${process.pid}-${Date.now()}`;
/** Where the test server keeps images (images/layout.ts: LOCALE2B_IMAGES_DIR, else the default data dir's). */
const imagesDir = () => serverImagesDir();

beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  work = mkdtempSync(join(tmpdir(), "locale2b-tplesc-"));
}, 120_000);

afterAll(async () => {
  restoreEnv();
  await cp?.close();
  if (work) rmSync(work, { recursive: true, force: true });
  for (const p of [`/tmp/${marker}`, `/tmp/${marker}-abs`, `/tmp/${marker}-dotdot`, `/tmp/${marker}-link`, `/tmp/${marker}-export`, `/tmp/${marker}-run-user`, `/tmp/${marker}-run-root`]) rmSync(p, { force: true, recursive: true });
});

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${cp.url}${path}`, { method, headers: { "x-api-key": cp.apiKey, "content-type": "application/json" }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : {} };
}

/** A tar made by Python's tarfile, as a hostile client would send it: `script` adds members to `t`. */
function hostileTar(file: string, script: string): Buffer {
  const r = spawnSync("python3", ["-c", `import io, tarfile, sys\nt = tarfile.open(sys.argv[1], "w")\ndef add(name, data=b"x", **kw):\n    i = tarfile.TarInfo(name)\n    for k, v in kw.items(): setattr(i, k, v)\n    i.size = len(data) if i.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0\n    t.addfile(i, io.BytesIO(data) if i.size else None)\n${script}\nt.close()`, file]);
  if (r.status !== 0) throw new Error(r.stderr.toString());
  return readFileSync(file);
}

async function waitBuild(templateID: string, buildID: string): Promise<{ status: string; reason?: { message: string } }> {
  for (;;) {
    const s = (await api("GET", `/templates/${templateID}/builds/${buildID}/status`)).json as { status: string; reason?: { message: string } };
    if (s.status === "ready" || s.status === "error") return s;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Uploads `tar` for a new template and builds it with `steps` (a COPY of it as `copy`). */
async function buildWith(name: string, tar: Buffer, steps: Record<string, unknown>[]): Promise<{ templateID: string; buildID: string; status: string; reason?: { message: string } }> {
  const req = (await api("POST", "/v3/templates", { name })).json as { templateID: string; buildID: string };
  const hash = createHash("sha256").update(tar).digest("hex");
  if (steps.some((s) => s.type === "COPY")) {
    const link = (await api("GET", `/templates/${req.templateID}/files/${hash}`)).json as { present: boolean; url?: string };
    if (!link.present) expect((await fetch(link.url!, { method: "PUT", body: tar })).status).toBe(200);
  }
  const started = await api("POST", `/v2/templates/${req.templateID}/builds/${req.buildID}`, { fromTemplate: "base", steps: steps.map((s) => (s.type === "COPY" ? { ...s, filesHash: hash } : s)) });
  expect(started.status, String(started.json.message)).toBe(202);
  return { ...req, ...(await waitBuild(req.templateID, req.buildID)) };
}

describe.skipIf(skip !== undefined)(`escapes through template builds${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 300_000 }, () => {
  it("a COPY tar with absolute names, '..' and a symlink to the host's /tmp writes only inside the template", async () => {
    const tar = hostileTar(
      join(work, "copy.tar"),
      [
        `add("/tmp/${marker}-abs", b"absolute")`,
        `add("../../../../tmp/${marker}-dotdot", b"dotdot")`,
        `add("app/ok.txt", b"fine")`,
        `add("app/hostlink", type=tarfile.SYMTYPE, linkname="/tmp")`,
        `add("app/hostlink/${marker}-link", b"through the link")`,
      ].join("\n"),
    );
    const r = await buildWith(`copy-esc-${process.pid}`, tar, [
      { type: "COPY", args: ["app", "/home/user/app", "", ""] },
      { type: "RUN", args: [`ls -la /home/user/app; cat /tmp/${marker}-abs /tmp/${marker}-dotdot 2>&1; true`, "root"] },
    ]);
    // Whatever the tar does, it does in the build's sandbox, whose own tar refuses '..' and writing through a link it made.
    for (const p of [`/tmp/${marker}-abs`, `/tmp/${marker}-dotdot`, `/tmp/${marker}-link`]) expect(existsSync(p), p).toBe(false);
    expect(r.status).toBe("error");
    expect(r.reason?.message).toMatch(/copying app to \/home\/user\/app failed.*Member name contains '\.\.'/);
    // The same tar without the members the sandbox's tar refuses builds; what it holds lands inside the template only.
    const tame = hostileTar(join(work, "tame.tar"), [`add("/tmp/${marker}-abs", b"absolute")`, `add("app/ok.txt", b"fine")`, `add("app/hostlink", type=tarfile.SYMTYPE, linkname="/tmp")`].join("\n"));
    const t = await buildWith(`copy-esc2-${process.pid}`, tame, [{ type: "COPY", args: ["app", "/home/user/app", "", ""] }]);
    expect(t.status, t.reason?.message).toBe("ready");
    expect(existsSync(`/tmp/${marker}-abs`)).toBe(false);
    const s = await Sandbox.create(t.templateID);
    try {
      expect((await s.commands.run("cat /home/user/app/ok.txt")).stdout).toBe("fine");
      // The symlink is the template's own: it points at the sandbox's /tmp, not the host's.
      expect((await s.commands.run("readlink /home/user/app/hostlink")).stdout.trim()).toBe("/tmp");
    } finally {
      await s.kill();
    }
  });

  it("RUN steps as user and as root write where the host would see it only in their sandbox", async () => {
    const r = await buildWith(`run-esc-${process.pid}`, Buffer.from(""), [
      { type: "RUN", args: [`echo user > /tmp/${marker}-run-user; ls /proc/1/root/ >/dev/null 2>&1; echo ok`] },
      { type: "RUN", args: [`echo root > /tmp/${marker}-run-root; mount -t tmpfs x /mnt 2>&1 || true; echo ok`, "root"] },
    ]);
    expect(r.status, r.reason?.message).toBe("ready");
    expect(existsSync(`/tmp/${marker}-run-user`)).toBe(false);
    expect(existsSync(`/tmp/${marker}-run-root`)).toBe(false);
  });

  /** Builds a template whose last step puts a tar-writing program (`members`: Python adding members) in place of tar. */
  async function hostileExport(name: string, members: string[]) {
    const evil = [
      "import io, tarfile, sys",
      "t = tarfile.open(fileobj=sys.stdout.buffer, mode='w|')",
      "def add(name, data=b'x', **kw):",
      "    i = tarfile.TarInfo(name)",
      "    for k, v in kw.items(): setattr(i, k, v)",
      "    i.size = len(data) if i.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0",
      "    t.addfile(i, io.BytesIO(data) if i.size else None)",
      "add('./etc/passwd', b'root:x:0:0::/root:/bin/sh\\nuser:x:1000:1000::/home/user:/bin/sh\\n')",
      ...members,
      "t.close()",
    ].join("\n");
    const b64 = Buffer.from(evil).toString("base64");
    return buildWith(name, Buffer.from(""), [
      { type: "RUN", args: [`echo ${b64} | base64 -d > /opt/evil.py && printf '#!/bin/sh\\nexec python3 /opt/evil.py\\n' > /usr/bin/tar && chmod 755 /usr/bin/tar && { [ -L /bin ] || cp /usr/bin/tar /bin/tar; }`, "root"] },
    ]);
  }

  it("a hostile export (the steps replaced tar) with absolute names, device nodes and a setuid file: all inside the image, no device node kept, the image private to root", async () => {
    const r = await hostileExport(`export-esc-${process.pid}`, [
      `add('/tmp/${marker}-export', b'absolute')`,
      "add('./disk', type=tarfile.BLKTYPE, devmajor=8, devminor=0)",
      "add('./home/user/mem', type=tarfile.CHRTYPE, devmajor=1, devminor=1)",
      "add('./suid-shell', b'#!/bin/sh\\n', mode=0o4755)",
    ]);
    expect(r.status, r.reason?.message).toBe("ready");
    expect(existsSync(`/tmp/${marker}-export`)).toBe(false);
    const image = findTemplateImage(`@${r.buildID}`, imagesDir())!;
    // The absolute name landed in the image (GNU tar strips the leading '/'), not on the host.
    expect(existsSync(join(image.rootfsDir, "tmp", `${marker}-export`))).toBe(true);
    expect(statSync(image.dir).mode & 0o077).toBe(0);
    const devices: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        if (e.isDirectory()) walk(join(dir, e.name));
        else if (e.isBlockDevice() || e.isCharacterDevice()) devices.push(join(dir, e.name));
      }
    };
    walk(image.rootfsDir);
    expect(devices).toEqual([]);
  });

  it("a hostile export with '..' and a file through a symlink it made to the host's /etc: refused, nothing written, no image", async () => {
    const r = await hostileExport(`export-esc2-${process.pid}`, [
      `add('./../../../../tmp/${marker}-export', b'dotdot')`,
      "add('./hostetc', type=tarfile.SYMTYPE, linkname='/etc')",
      `add('./hostetc/${marker}', b'through the link')`,
    ]);
    expect(existsSync(`/tmp/${marker}-export`)).toBe(false);
    expect(existsSync(`/etc/${marker}`)).toBe(false);
    expect(r.status).toBe("error");
    expect(r.reason?.message).toMatch(/unpacking the build's root failed/);
    expect(findTemplateImage(`@${r.buildID}`, imagesDir())).toBeUndefined();
  });
});
