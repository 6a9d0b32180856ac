// What E2B's `base` has, in ours, used as an agent would, with the real E2B
// SDK against a real control plane on the process runtime: pip as user and as
// root (no PEP 668 refusal) and in a venv, npm in a project and `npm install
// -g` as root, yarn, a C compiler, jq, ss, ping; and envd on its own Node, so
// the user removing theirs does not stop it. Installs from PyPI and the npm
// registry skip, saying so, when this host cannot reach them.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findTemplateImage, GUEST } from "../../control-plane/images/layout.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const dir = testImagesDir();
const image = findTemplateImage("base", dir);
const runtime = new ProcessRuntime({ imagesDir: dir });
const caps = process.getuid?.() === 0 ? await runtime.capabilities() : undefined;
const missing =
  process.getuid?.() !== 0
    ? "template roots need root (overlay mounts, pivot_root)"
    : caps?.mode !== "sandbox"
      ? `the process runtime cannot run template roots here: ${caps?.missing ?? caps?.mode}`
      : !image
        ? `the base template is not built in ${dir} (locale2b template build base; npm test builds it when it can)`
        : !(image.manifest.definition as { node?: unknown }).node
          ? `the base template in ${dir} is an older build without Node for the user (locale2b template build base)`
          : undefined;

/** Why the sandbox cannot be expected to reach `url` (this host cannot, within 10 s), or undefined. */
async function unreachable(url: string): Promise<string | undefined> {
  try {
    const res = await fetch(url, { method: "HEAD", signal: AbortSignal.timeout(10_000) });
    return res.status < 500 ? undefined : `${url} answers ${res.status}`;
  } catch (err) {
    return `this host cannot reach ${url}: ${(err as Error).message}`;
  }
}
const noPypi = missing ? undefined : await unreachable("https://pypi.org/simple/six/");
const noNpm = missing ? undefined : await unreachable("https://registry.npmjs.org/semver");

let cp: TestControlPlane;
let restoreEnv = () => {};
let sbx: Sandbox;

/** Runs a shell command as E2B's SDK does (`bash -l -c`); never throws: exit code and stdout+stderr. */
async function sh(command: string, user: "user" | "root" = "user", s = sbx): Promise<{ code: number; out: string }> {
  try {
    const r = await s.commands.run(command, { user, timeoutMs: 240_000 });
    return { code: r.exitCode, out: `${r.stdout}${r.stderr}` };
  } catch (err) {
    const e = err as { exitCode?: number; stdout?: string; stderr?: string; message: string };
    return { code: e.exitCode ?? -1, out: `${e.stdout ?? ""}${e.stderr ?? e.message}` };
  }
}

beforeAll(async () => {
  if (missing) return;
  cp = await startTestControlPlane({ runtime });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
}, 120_000);

afterAll(async () => {
  restoreEnv();
  await cp?.close();
});

const why = (reason: string | undefined) => (reason ? ` [skipped: ${reason}]` : "");

describe.skipIf(missing !== undefined)(`the base image has what E2B's base has${why(missing)}`, { timeout: 300_000 }, () => {
  it("python, python3, pip, pip3 and Node 20 with npm, npx and yarn are on the user's PATH", async () => {
    const r = await sh("for c in python python3 pip pip3 node nodejs npm npx yarn gcc g++ make git curl wget jq ip ss ping ps less unzip zip file ssh sudo; do command -v $c >/dev/null || echo missing $c; done; node --version; yarn --version; python --version");
    expect(r.out).not.toMatch(/missing/);
    expect(r.code).toBe(0);
    expect(r.out).toContain(process.version);
    expect(r.out).toMatch(/^1\.22\.\d+$/m);
    expect(r.out).toMatch(/^Python 3\.11\./m);
    // No PEP 668 marker: pip does not refuse to install outside a venv.
    expect((await sh("ls /usr/lib/python3*/EXTERNALLY-MANAGED 2>&1; true")).out).toMatch(/No such file/);
  });

  it("compiles and runs a C program with gcc, and a C++ one with g++", async () => {
    await sbx.files.write("/home/user/hello.c", '#include <stdio.h>\nint main(void) { printf("hello %d\\n", 6 * 7); return 0; }\n');
    await sbx.files.write("/home/user/hello.cc", '#include <iostream>\nint main() { std::cout << "c++ " << __cplusplus << std::endl; }\n');
    const r = await sh("cd ~ && gcc -O2 -Wall -o hello hello.c && ./hello && g++ -o hellocc hello.cc && ./hellocc");
    expect(r.out).toMatch(/^hello 42\nc\+\+ \d+\n$/);
    expect(r.code).toBe(0);
  });

  it("jq, ss -lnt (a port the user listens on) and ping -c1 127.0.0.1 as user", async () => {
    expect((await sh(`echo '{"a":[1,2,3]}' | jq -c '.a | add'`)).out).toBe("6\n");
    const server = await sbx.commands.run("python3 -m http.server 8765 --bind 127.0.0.1", { background: true });
    try {
      let ss = "";
      for (let i = 0; i < 100 && !ss.includes("127.0.0.1:8765"); i++) {
        ss = (await sh("ss -lnt")).out;
        if (!ss.includes("127.0.0.1:8765")) await new Promise((r) => setTimeout(r, 100));
      }
      expect(ss).toMatch(/^State\s+Recv-Q/m);
      expect(ss).toContain("127.0.0.1:8765");
    } finally {
      await server.kill();
    }
    const ping = await sh("id -un; ping -c1 -W5 127.0.0.1");
    expect(ping.out).toMatch(/^user\n/);
    expect(ping.out).toMatch(/1 packets transmitted, 1 received/);
    expect(ping.code).toBe(0);
  });

  it.skipIf(noPypi !== undefined)(`pip install as user (to ~/.local) and as root (to /usr/local), then import${why(noPypi)}`, async () => {
    const user = await sh("pip install --no-cache-dir six==1.16.0 && python -c 'import six, sys; print(six.__version__, six.__file__)'");
    expect(user.out, user.out).toMatch(/^1\.16\.0 \/home\/user\/\.local\/lib\/python3\.\d+\/site-packages\/six\.py$/m);
    expect(user.out).not.toMatch(/externally-managed-environment/);
    expect(user.code).toBe(0);
    const root = await sh("pip3 install --no-cache-dir six==1.17.0 && python3 -c 'import six; print(six.__version__, six.__file__)'", "root");
    expect(root.out, root.out).toMatch(/^1\.17\.0 \/usr\/local\/lib\/python3\.\d+\/dist-packages\/six\.py$/m);
    expect(root.code).toBe(0);
    // What root installed is everyone's; the user's own install comes first for the user.
    expect((await sh("python -c 'import six; print(six.__version__)'")).out).toBe("1.16.0\n");
    expect((await sh("python -s -c 'import six; print(six.__version__)'")).out).toBe("1.17.0\n");
  });

  it.skipIf(noPypi !== undefined)(`python -m venv, then pip in it${why(noPypi)}`, async () => {
    const r = await sh("python -m venv ~/venv && ~/venv/bin/pip install --no-cache-dir six==1.16.0 && ~/venv/bin/python -c 'import six; print(six.__file__)'");
    expect(r.out, r.out).toMatch(/^\/home\/user\/venv\/lib\/python3\.\d+\/site-packages\/six\.py$/m);
    expect(r.code).toBe(0);
  });

  it.skipIf(noNpm !== undefined)(`npm install in a project as user, npm install -g as root${why(noNpm)}`, async () => {
    const project = await sh("mkdir -p ~/proj && cd ~/proj && npm init -y >/dev/null && npm install --no-fund --no-audit is-number@7.0.0 && node -e \"console.log(require('is-number')(5), require('is-number')('x'))\"");
    expect(project.out, project.out).toMatch(/^true false$/m);
    expect(project.code).toBe(0);
    const global = await sh("npm install -g --no-fund --no-audit semver@7.6.3 && command -v semver", "root");
    expect(global.out, global.out).toMatch(/^\/usr\/local\/bin\/semver$/m);
    // Installed for everyone: the user runs it.
    expect((await sh("semver -r '>=1.2.0' 1.2.3 1.1.0")).out).toBe("1.2.3\n");
    const yarn = await sh("mkdir -p ~/yproj && cd ~/yproj && echo '{\"name\":\"y\",\"version\":\"1.0.0\"}' > package.json && yarn add --silent is-number@7.0.0 && node -e \"console.log(require('is-number')(1))\"");
    expect(yarn.out, yarn.out).toMatch(/^true$/m);
    expect(yarn.code).toBe(0);
  });

  it.skipIf(noPypi !== undefined || noNpm !== undefined)(
    `TLS trusts the system's CA store, the build host's local CAs included: curl, Python, Node, npm and yarn (also without NODE_EXTRA_CA_CERTS), a pip that upgraded itself${why(noPypi ?? noNpm)}`,
    async () => {
      const r = await sh(
        [
          "curl -sS -o /dev/null -w 'curl %{http_code}\\n' https://pypi.org/simple/six/",
          `python3 -c "import urllib.request; print('python', urllib.request.urlopen('https://pypi.org/simple/six/').status)"`,
          `node -e "fetch('https://registry.npmjs.org/semver').then((r) => console.log('node', r.status))"`,
          // Fresh caches: each asks the registry. npm and yarn read /usr/local/etc/npmrc's cafile.
          "env -u NODE_EXTRA_CA_CERTS npm view semver@7.6.3 version --cache $(mktemp -d)",
          "cd /tmp && env -u NODE_EXTRA_CA_CERTS yarn info --silent semver@7.6.3 version --cache-folder $(mktemp -d)",
          "python -m pip install --no-cache-dir -q -U pip && python -m pip download --no-cache-dir -q --no-deps -d /tmp/dl six==1.16.0 && ls /tmp/dl",
        ].join(" && "),
      );
      expect(r.out, r.out).toMatch(/^curl 200\npython 200\nnode 200\n7\.6\.3\n7\.6\.3\n(.*\n)*six-1\.16\.0-py2\.py3-none-any\.whl\n$/);
      expect(r.code).toBe(0);
    },
  );

  it("envd runs on its own Node: removing the user's /usr/local/bin/node (or npm) leaves the sandbox working", async () => {
    const s = await Sandbox.create("base", { timeoutMs: 120_000 });
    try {
      const envd = await sh("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q envd.js && readlink $p/exe; done", "root", s);
      expect(envd.out.trim().split("\n")).toContain(GUEST.node);
      expect((await sh("rm /usr/local/bin/node /usr/local/bin/npm && echo removed", "root", s)).out).toBe("removed\n");
      const after = await sh("command -v node || echo no-node; echo still here", "user", s);
      expect(after.out).toBe("no-node\nstill here\n");
      await s.files.write("/home/user/after.txt", "ok");
      expect(await s.files.read("/home/user/after.txt")).toBe("ok");
    } finally {
      await s.kill();
    }
  });
});
