// E2B's Template SDK with the real `e2b` JS SDK against a real control plane
// on the process runtime: every step type, the step cache (a rebuild runs
// only what changed; skipCache runs everything), a failing RUN, a
// Dockerfile, start and ready commands (a server answering right after
// Sandbox.create), tags, the build in the background, the template list and
// delete. Every REST answer is checked against E2B's OpenAPI spec. Needs
// root (builds run in real sandboxes and make images).
import { mkdtempSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Template, waitForPort, type LogEntry } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { CONTROL_PLANE_SPEC, specAvailable, validatorFor } from "../helpers/openapi.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;
const HAVE_SPEC = specAvailable(CONTROL_PLANE_SPEC);

let cp: TestControlPlane;
let restoreEnv = () => {};
let context = "";
const sandboxes: Sandbox[] = [];
let n = 0;
const unique = (what: string) => `${what}-${process.pid}-${n++}`;

/** How long this server's ready checks wait (a test of a command that never gets ready waits that long). */
const READY_TIMEOUT_S = 15;

beforeAll(async () => {
  if (skip) return;
  const restoreTimeout = setEnv({ LOCALE2B_TEMPLATE_READY_TIMEOUT_S: String(READY_TIMEOUT_S) });
  cp = await startTestControlPlane({ runtime }).finally(restoreTimeout);
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  context = mkdtempSync(join(tmpdir(), "locale2b-tpl-ctx-"));
  mkdirSync(join(context, "app", "sub"), { recursive: true });
  writeFileSync(join(context, "app", "main.py"), "print('hello from the template')\n");
  writeFileSync(join(context, "app", "sub", "deep.txt"), "deep\n");
  writeFileSync(join(context, "app", ".hidden"), "hidden\n");
  writeFileSync(join(context, "run.sh"), "#!/bin/sh\necho run.sh ran\n");
  symlinkSync("main.py", join(context, "app", "link.py"));
}, 120_000);

afterAll(async () => {
  await Promise.all(sandboxes.map((s) => s.kill().catch(() => false)));
  restoreEnv();
  await cp?.close();
  if (context) rmSync(context, { recursive: true, force: true });
});

async function create(template: string, opts?: Parameters<typeof Sandbox.create>[1]): Promise<Sandbox> {
  const sbx = await Sandbox.create(template, { timeoutMs: 600_000, ...opts });
  sandboxes.push(sbx);
  return sbx;
}

async function out(s: Sandbox, command: string, user?: "root" | "user"): Promise<string> {
  const r = await s.commands.run(command, { ...(user ? { user } : {}), timeoutMs: 120_000 });
  return r.stdout;
}

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown; headers: Headers }> {
  const res = await fetch(`${cp.url}${path}`, {
    method,
    headers: { "x-api-key": cp.apiKey, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined, headers: res.headers };
}

function expectSchema(name: string, data: unknown): void {
  if (!HAVE_SPEC) return;
  const v = validatorFor(CONTROL_PLANE_SPEC, `#/components/schemas/${name}`);
  expect(v(data), `${name}: ${v.errorText}`).toBe(true);
}

/** Builds and returns the log's messages. */
async function build(template: Parameters<typeof Template.build>[0], name: string, opts: { skipCache?: boolean; tags?: string[] } = {}): Promise<{ messages: string[]; templateId: string; buildId: string }> {
  const messages: string[] = [];
  const r = await Template.build(template, name, { ...opts, onBuildLogs: (l: LogEntry) => messages.push(l.message) });
  return { messages, templateId: r.templateId, buildId: r.buildId };
}

describe.skipIf(skip !== undefined)(`the Template SDK${skip ? ` (skipped: ${skip})` : ""}`, { timeout: 600_000 }, () => {
  it("every step type: RUN as the user and as root, ENV, WORKDIR, USER (made when missing), COPY of a folder, a file and a glob with owner and mode", async () => {
    const t = Template({ fileContextPath: context })
      .fromTemplate("base")
      .setEnvs({ GREETING: "hello", TOOLS: "$HOME/tools:$GREETING" })
      .runCmd("echo \"RUN as $(whoami) in $(pwd): $GREETING\" && touch ~/made-by-run")
      .runCmd("mkdir -p /opt/root-made && echo root > /opt/root-made/who", { user: "root" })
      .setWorkdir("/home/user/project")
      .copy("app/", "app/")
      .copy("run.sh", "/usr/local/bin/run-it", { mode: 0o755, user: "root" })
      .copy("app/*.py", "/home/user/py/")
      .setUser("worker")
      .runCmd("whoami > /tmp/worker-ran && test -d ~ && echo \"$(id -u) $HOME\" > /tmp/worker-home");
    // The step cache is the host's: skipCache, so this run's steps run (and log their output).
    const r = await build(t, unique("steps"), { skipCache: true });
    // The log names each step as it runs, and a RUN's output.
    expect(r.messages, r.messages.join("\n")).toContain("RUN as user in /home/user: hello");
    expect(r.messages.some((m) => m.startsWith("COPY app/ app/"))).toBe(true);

    const s = await create(r.templateId);
    // The sandbox starts as the last USER, in the last WORKDIR, with the ENV.
    // ENV values are expanded from the ENV before them, as a Dockerfile's are ($HOME is no ENV: empty).
    expect(await out(s, "whoami; pwd; echo $GREETING; echo $TOOLS")).toBe("worker\n/home/user/project\nhello\n/tools:hello\n");
    // USER made the missing user (a home of its own; no sudo: the SDK does not ask for it).
    expect(await out(s, "cat /tmp/worker-ran /tmp/worker-home /opt/root-made/who")).toMatch(/^worker\n(\d+) \/home\/worker\nroot\n$/);
    expect((await s.commands.run("sudo -n true", { timeoutMs: 30_000 }).catch((e: { exitCode?: number }) => e)).exitCode).not.toBe(0);
    // A folder's contents (hidden files and symlinks too) into the destination, relative to WORKDIR.
    expect(await out(s, "ls -A app | tr '\\n' ' '; ls app/sub; readlink app/link.py")).toBe(".hidden link.py main.py sub deep.txt\nmain.py\n");
    // COPY: owned by the user (and its group) unless told otherwise; the mode applies to files.
    expect(await out(s, "stat -c '%U:%G %a' app/main.py /usr/local/bin/run-it /home/user/py/main.py")).toBe("user:user 644\nroot:root 755\nuser:user 644\n");
    expect(await out(s, "run-it; ls /home/user/py; test -f /home/user/made-by-run && echo made")).toBe("run.sh ran\nlink.py\nmain.py\nmade\n");
  });

  it("a rebuild runs only the steps from the first change on; skipCache runs them all", async () => {
    const name = unique("cache");
    // The step cache is the host's: a first step of this run's own, so the first build finds nothing cached.
    const first = `echo first > /tmp/first && echo ${name}-${Date.now()} > /tmp/first-run`;
    const mk = (last: string) =>
      Template({ fileContextPath: context })
        .fromTemplate("base")
        .runCmd(first)
        .copy("app/main.py", "/home/user/main.py")
        .runCmd(last);
    const a = await build(mk("echo last-a > /tmp/last"), name);
    expect(a.messages.filter((m) => m.startsWith("CACHED"))).toEqual([]);
    const b = await build(mk("echo last-b > /tmp/last"), name);
    expect(b.messages.filter((m) => m.startsWith("CACHED"))).toEqual([`CACHED RUN ${first}`, "CACHED COPY app/main.py /home/user/main.py"]);
    expect(b.messages).toContain("RUN echo last-b > /tmp/last");
    const c = await build(mk("echo last-b > /tmp/last"), name, { skipCache: true });
    expect(c.messages.filter((m) => m.startsWith("CACHED"))).toEqual([]);
    // The same template, rebuilt: its sandboxes have the newest build's files; the cached step's result is the first build's.
    const s = await create(name);
    expect(await out(s, "cat /tmp/last /tmp/first")).toBe("last-b\nfirst\n");
  });

  it("a failing RUN ends the build with status error, the step and the command's last output; no template is made", async () => {
    const name = unique("fails");
    const t = Template().fromTemplate("base").runCmd("echo fine").runCmd("echo something went wrong >&2; exit 3");
    const err = await Template.build(t, name, { onBuildLogs: () => undefined }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.name).toBe("BuildError");
    expect(err?.message).toMatch(/exited with 3.*something went wrong/);
    const v = await api("GET", `/templates/${name}`);
    expect(v.status).toBe(200);
    expectSchema("TemplateWithBuilds", v.json);
    const buildId = (v.json as { builds: { buildID: string }[] }).builds[0]!.buildID;
    const st = await api("GET", `/templates/${name}/builds/${buildId}/status`);
    expectSchema("TemplateBuildInfo", st.json);
    expect(st.json).toMatchObject({ status: "error", reason: { step: "2", message: expect.stringMatching(/exited with 3/) } });
    // No tag points at a failed build: the name resolves to nothing.
    await expect(Sandbox.create(name)).rejects.toThrow(/not found/);
  });

  it("fromDockerfile: the SDK's parse of a Dockerfile builds as E2B's does (root while building, user and /home/user after)", async () => {
    const dockerfile = ["FROM e2bdev/base", "ENV APP_HOME=/srv/app", "RUN mkdir -p $APP_HOME && echo from-dockerfile > $APP_HOME/marker", "COPY run.sh /srv/app/run.sh", "RUN chmod +x /srv/app/run.sh"].join("\n");
    const r = await build(Template({ fileContextPath: context }).fromDockerfile(dockerfile), unique("dockerfile"));
    const s = await create(r.templateId);
    expect(await out(s, "whoami; pwd; cat $APP_HOME/marker; /srv/app/run.sh; stat -c %U /srv/app/marker")).toBe("user\n/home/user\nfrom-dockerfile\nrun.sh ran\nroot\n");
  });

  it("start and ready commands: the server the start command runs answers right after Sandbox.create", async () => {
    const name = unique("server");
    const t = Template()
      .fromTemplate("base")
      .runCmd("mkdir -p /home/user/www && echo served-by-the-start-command > /home/user/www/index.html")
      .setStartCmd("cd /home/user/www && python3 -m http.server 8000", waitForPort(8000));
    const r = await build(t, name);
    expect(r.messages.some((m) => m.includes("checking the start command"))).toBe(true);
    const s = await create(name);
    // No wait: the create answered once the ready command succeeded.
    const res = await fetch(`${cp.url}/`, { headers: { "E2b-Sandbox-Id": s.sandboxId, "E2b-Sandbox-Port": "8000" } });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("served-by-the-start-command\n");
  });

  it("a start command that never becomes ready fails its build at finalize", async () => {
    const t = Template().fromTemplate("base").setStartCmd("sleep 1000", "false");
    const err = await Template.build(t, unique("never-ready"), { onBuildLogs: () => undefined }).then(
      () => undefined,
      (e: Error) => e,
    );
    // This server waits READY_TIMEOUT_S (LOCALE2B_TEMPLATE_READY_TIMEOUT_S), as E2B waits 10 minutes.
    expect(err?.message).toMatch(new RegExp(`ready command 'false' did not succeed within ${READY_TIMEOUT_S} s`));
  });

  it("tags, exists, buildInBackground with getBuildStatus, list, get, the files link, and delete", async () => {
    const name = unique("tags");
    const bg = await Template.buildInBackground(Template().fromTemplate("base").runCmd("echo v1 > /tmp/version"), `${name}:v1`);
    for (;;) {
      const st = await Template.getBuildStatus(bg);
      if (st.status === "ready") break;
      expect(["waiting", "building"]).toContain(st.status);
      await new Promise((r) => setTimeout(r, 250));
    }
    await build(Template().fromTemplate("base").runCmd("echo v2 > /tmp/version"), `${name}:v2`);
    expect(await Template.exists(name)).toBe(true);
    expect(await Template.exists(unique("absent"))).toBe(false);
    expect(await out(await create(`${name}:v1`), "cat /tmp/version")).toBe("v1\n");
    expect(await out(await create(`${name}:v2`), "cat /tmp/version")).toBe("v2\n");
    // A new tag on v1's build, and its removal.
    const tagged = await api("POST", "/templates/tags", { target: `${name}:v1`, tags: ["stable"] });
    expect(tagged.status).toBe(201);
    expectSchema("AssignedTemplateTags", tagged.json);
    expect(await out(await create(`${name}:stable`), "cat /tmp/version")).toBe("v1\n");
    const tags = await api("GET", `/templates/${bg.templateId}/tags`);
    for (const tag of tags.json as unknown[]) expectSchema("TemplateTag", tag);
    expect((tags.json as { tag: string }[]).map((t) => t.tag).sort()).toEqual(["stable", "v1", "v2"]);
    expect((await api("DELETE", "/templates/tags", { name, tags: ["stable"] })).status).toBe(204);
    await expect(Sandbox.create(`${name}:stable`)).rejects.toThrow(/not found/);

    const list = await api("GET", "/templates");
    for (const t of list.json as unknown[]) expectSchema("Template", t);
    const mine = (list.json as { templateID: string; names: string[]; buildStatus: string; sizeBytes: number }[]).find((t) => t.templateID === bg.templateId);
    expect(mine).toMatchObject({ names: [name], buildStatus: "ready" });
    // The disk its ready build takes (locale2b's own field): a root filesystem of hundreds of MiB.
    expect(mine!.sizeBytes).toBeGreaterThan(50 * 2 ** 20);
    expect((list.json as { templateID: string }[]).some((t) => t.templateID === "base")).toBe(true);
    const v2 = await api("GET", "/v2/templates?limit=1");
    expect(v2.headers.get("x-next-token")).toBeTruthy();
    const link = await api("GET", `/templates/${bg.templateId}/files/${"a".repeat(64)}`);
    expect(link.status).toBe(201);
    expectSchema("TemplateBuildFileUpload", link.json);
    expect(link.json).toMatchObject({ present: false, url: expect.stringContaining(`/templates/${bg.templateId}/files/`) });
    const patched = await api("PATCH", `/v2/templates/${bg.templateId}`, { public: true });
    expectSchema("TemplateUpdateResponse", patched.json);

    // Delete: refused while a sandbox runs on it, then done.
    const refused = await api("DELETE", `/templates/${name}`);
    expect(refused.status).toBe(409);
    expect((refused.json as { message: string }).message).toMatch(/still used by \d+ sandbox/);
    await Promise.all(sandboxes.splice(0).map((s) => s.kill()));
    expect((await api("DELETE", `/templates/${name}`)).status).toBe(204);
    expect(await Template.exists(name)).toBe(false);
    await expect(Sandbox.create(name)).rejects.toThrow(/not found/);
  });
});
