// The built CLI as a person runs it: `serve`, `keys`, `sandbox` (incl.
// exec through the envd proxy), `--help` everywhere. Child processes only.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultDataDir, resolveDataDir } from "../../control-plane/config.js";
import { runCli, serve, type Served } from "../helpers/cli.js";

const KEY_RE = /e2b_[0-9a-f]{40}/;
const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "locale2b-cli-"));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe("help and usage", () => {
  it.each([
    [["--help"]],
    [["serve", "--help"]],
    [["sandbox", "--help"]],
    [["sandbox", "exec", "--help"]],
    [["sandbox", "create", "-h"]],
    [["keys", "--help"]],
    [["keys", "create", "--help"]],
    [["envd", "--help"]],
    [["backup", "--help"]],
    [["restore", "--help"]],
  ])("locale2b %j prints usage and exits 0", async (args) => {
    const run = await runCli(args);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain("Usage: locale2b");
  });

  it("mistakes exit 2 with a pointer to --help", async () => {
    for (const args of [["serve", "--bogus"], ["sandbox", "nope"], ["keys", "list", "extra"], ["nope"]]) {
      const run = await runCli(args);
      expect(run.code, args.join(" ")).toBe(2);
      expect(run.stderr).toMatch(/--help|Usage/);
    }
  });

  it("serve --runtime qemu without a guest kernel or tools refuses to start and says what to do", async () => {
    const images = tempDir();
    const run = await runCli(["serve", "--runtime", "qemu", "--data-dir", tempDir()], { LOCALE2B_IMAGES_DIR: images });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("cannot start the 'qemu' runtime");
    // Either the tools are missing (setup-host) or, with them installed, the kernel (build-kernel.sh).
    expect(run.stderr).toMatch(/scripts\/setup-host|scripts\/build-kernel\.sh/);
  });

  it("LOCALE2B_RUNTIME picks the runtime; an unknown one is a usage error", async () => {
    const run = await runCli(["serve", "--data-dir", tempDir()], { LOCALE2B_RUNTIME: "qemu", LOCALE2B_IMAGES_DIR: tempDir() });
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("cannot start the 'qemu' runtime");
    const bad = await runCli(["serve", "--runtime", "docker", "--data-dir", tempDir()]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("unknown runtime 'docker' (known: process, gvisor, qemu, firecracker)");
  });

  it("npm start runs serve from dist/", () => {
    const pkg = JSON.parse(readFileSync(fileURLToPath(new URL("../../package.json", import.meta.url)), "utf8")) as {
      scripts: Record<string, string>;
    };
    expect(pkg.scripts.start).toBe("node dist/control-plane/cli/main.js serve");
  });

  it("the default data dir follows root / XDG_STATE_HOME / HOME", () => {
    expect(defaultDataDir({}, 0)).toBe("/var/lib/locale2b");
    expect(defaultDataDir({ XDG_STATE_HOME: "/x/state", HOME: "/home/u" }, 1000)).toBe("/x/state/locale2b");
    expect(defaultDataDir({ XDG_STATE_HOME: "relative", HOME: "/home/u" }, 1000)).toBe("/home/u/.local/state/locale2b");
    expect(defaultDataDir({ HOME: "/home/u" }, 1000)).toBe("/home/u/.local/state/locale2b");
    expect(resolveDataDir(undefined, { LOCALE2B_DATA_DIR: "/srv/l2b" })).toBe("/srv/l2b");
    expect(resolveDataDir("/flag", { LOCALE2B_DATA_DIR: "/srv/l2b" })).toBe("/flag");
  });
});

describe("serve", () => {
  it("prints the SDK env lines with a fresh key once, and not on the next start", async () => {
    const dir = tempDir();
    const first = await serve(dir);
    try {
      expect(first.banner).toMatch(/E2B_API_URL=http:\/\/127\.0\.0\.1:\d+/);
      expect(first.banner).toContain(`E2B_SANDBOX_URL=${first.url}`);
      const key = /E2B_API_KEY=(\S+)/.exec(first.banner)?.[1];
      expect(key).toMatch(new RegExp(`^${KEY_RE.source}$`));
      // Once for the E2B SDK, once for a workspace-API harness: the same key.
      expect(first.banner.match(new RegExp(KEY_RE.source, "g"))).toEqual([key, key]);
      expect(first.banner).toContain(`LOCALE2B_BASE_URL=${first.url}/workspace`);
      expect(first.banner).toContain(`LOCALE2B_API_KEY=${key}`);
      expect(first.banner).toContain(`Open the dashboard and sign in with that API key: ${first.url}/dashboard/`);
      const wsHealth = await fetch(`${first.url}/workspace/health`);
      expect(await wsHealth.json()).toMatchObject({ status: "ok", runtime: "process" });
      expect(first.banner).toMatch(/shown once/);
      expect(first.banner).toMatch(/Runtime 'process'/);
      const health = await fetch(`${first.url}/health`);
      expect(health.status).toBe(200);
      const list = await runCli(["sandbox", "list", "--url", first.url], { E2B_API_KEY: key! });
      expect(list.code, list.stderr).toBe(0);
    } finally {
      expect(await first.stop()).toBe(0);
    }
    const second = await serve(dir);
    try {
      expect(second.banner).toContain("E2B_API_URL=");
      expect(second.banner).not.toMatch(KEY_RE);
      expect(second.banner).toContain("locale2b keys create");
    } finally {
      expect(await second.stop()).toBe(0);
    }
  });

  it("accepts LOCALE2B_API_KEY and says to use it; refuses a malformed one", async () => {
    const key = `e2b_${"ab".repeat(20)}`;
    const s = await serve(tempDir(), [], { LOCALE2B_API_KEY: key });
    try {
      expect(s.banner).toContain('E2B_API_KEY="$LOCALE2B_API_KEY"');
      expect(s.banner).not.toMatch(KEY_RE);
      const list = await runCli(["sandbox", "list", "--url", s.url, "--api-key", key]);
      expect(list.code, list.stderr).toBe(0);
      const wrong = await runCli(["sandbox", "list", "--url", s.url, "--api-key", `e2b_${"cd".repeat(20)}`]);
      expect(wrong.code).toBe(1);
      expect(wrong.stderr).toContain("unauthenticated");
    } finally {
      await s.stop();
    }
    const bad = await runCli(["serve", "--port", "0", "--data-dir", tempDir()], { LOCALE2B_API_KEY: "secret" });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("LOCALE2B_API_KEY");
  });
});

describe("keys", () => {
  it("create, list, revoke on a data dir", async () => {
    const dir = tempDir();
    const created = await runCli(["keys", "create", "--name", "ci", "--data-dir", dir]);
    expect(created.code, created.stderr).toBe(0);
    const key = created.stdout.trim();
    expect(key).toMatch(new RegExp(`^${KEY_RE.source}$`));
    expect(created.stderr).toContain("shown once");

    const list = await runCli(["keys", "list", "--data-dir", dir]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain("ci");
    expect(list.stdout).toContain(key.slice(0, 8));
    expect(list.stdout).not.toContain(key);
    const json = JSON.parse((await runCli(["keys", "list", "--json"], { LOCALE2B_DATA_DIR: dir })).stdout) as { id: string; name: string }[];
    expect(json).toEqual([expect.objectContaining({ name: "ci" })]);

    // A data dir with a key already: serve accepts it and creates none.
    const s = await serve(dir);
    try {
      expect(s.banner).not.toMatch(KEY_RE);
      expect((await runCli(["sandbox", "list", "--url", s.url], { E2B_API_KEY: key })).code).toBe(0);
      // Revoked while the server runs: refused at once.
      const revoked = await runCli(["keys", "revoke", json[0]!.id, "--data-dir", dir]);
      expect(revoked.code, revoked.stderr).toBe(0);
      expect(revoked.stderr).toContain("No API keys remain");
      const refused = await runCli(["sandbox", "list", "--url", s.url], { E2B_API_KEY: key });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain("unauthenticated");
    } finally {
      await s.stop();
    }

    const second = (await runCli(["keys", "create", "--data-dir", dir])).stdout.trim();
    expect((await runCli(["keys", "revoke", second, "--data-dir", dir])).code).toBe(0);
    const missing = await runCli(["keys", "revoke", second, "--data-dir", dir]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("no API key matches");
    expect((await runCli(["keys", "list", "--data-dir", join(dir, "nope")])).code).toBe(1);
  });
});

describe("sandbox commands against a server", () => {
  let s: Served;
  let env: Record<string, string>;
  beforeAll(async () => {
    s = await serve(tempDir());
    env = { E2B_API_KEY: /E2B_API_KEY=(\S+)/.exec(s.banner)![1]!, LOCALE2B_URL: s.url };
  });
  afterAll(async () => {
    // Sandboxes outlive `serve`: kill what is left first.
    const left = await runCli(["sandbox", "list", "--json"], env);
    for (const sb of JSON.parse(left.stdout || "[]") as { sandboxId: string }[]) await runCli(["sandbox", "kill", sb.sandboxId], env);
    await s?.stop();
  });

  it("create, list, get, exec, pause, resume, kill", async () => {
    const created = await runCli(["sandbox", "create", "--metadata", "owner=cli-test", "--timeout", "120"], env);
    expect(created.code, created.stderr).toBe(0);
    const id = created.stdout.trim();
    expect(id).toMatch(/^[a-z0-9]+$/);

    const list = await runCli(["sandbox", "list", "--metadata", "owner=cli-test"], env);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain(id);
    expect(list.stdout).toContain("running");
    const get = await runCli(["sandbox", "get", id, "--json"], env);
    expect(JSON.parse(get.stdout)).toMatchObject({ sandboxId: id, metadata: { owner: "cli-test" }, state: "SANDBOX_STATE_RUNNING" });

    const exec = await runCli(["sandbox", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 7"], env);
    expect(exec.stdout).toBe("out\n");
    expect(exec.stderr).toBe("err\n");
    expect(exec.code).toBe(7);

    const ok = await runCli(["sandbox", "exec", id, "--env", "GREETING=hi there", "--cwd", "/", "--", "sh", "-c", 'echo "$GREETING from $(pwd)"'], env);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toBe("hi there from /\n");

    const many = await runCli(["sandbox", "exec", id, "--", "seq", "1", "20000"], env);
    expect(many.code, many.stderr).toBe(0);
    const lines = many.stdout.trim().split("\n");
    expect(lines).toHaveLength(20000);
    expect(lines.at(-1)).toBe("20000");

    const notFound = await runCli(["sandbox", "exec", id, "--", "no-such-command-xyz"], env);
    expect(notFound.code).toBe(127);
    expect(notFound.stderr).toContain("no-such-command-xyz");

    const killedBySignal = await runCli(["sandbox", "exec", id, "--", "sh", "-c", "kill -9 $$"], env);
    expect(killedBySignal.code).toBe(137);

    expect((await runCli(["sandbox", "pause", id], env)).code).toBe(0);
    const again = await runCli(["sandbox", "pause", id], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("already paused");
    const paused = await runCli(["sandbox", "exec", id, "--", "true"], env);
    expect(paused.code).toBe(1);
    expect(paused.stderr).toContain("sandbox resume");
    const resumed = await runCli(["sandbox", "resume", id], env);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toContain("resumed");
    expect((await runCli(["sandbox", "exec", id, "--", "true"], env)).code).toBe(0);

    const kill = await runCli(["sandbox", "kill", id], env);
    expect(kill.code, kill.stderr).toBe(0);
    const gone = await runCli(["sandbox", "get", id], env);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain("not_found");
    expect((await runCli(["sandbox", "list", "--metadata", "owner=cli-test"], env)).stdout).not.toContain(id);
  });

  it("says what to do without a key, without a server, and for a bad template", async () => {
    const noKey = await runCli(["sandbox", "list", "--url", s.url]);
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toContain("--api-key");
    const noServer = await runCli(["sandbox", "list", "--url", "http://127.0.0.1:1"], { E2B_API_KEY: env.E2B_API_KEY! });
    expect(noServer.code).toBe(1);
    expect(noServer.stderr).toContain("locale2b serve");
    const bad = await runCli(["sandbox", "create", "--template", "nope"], env);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("template 'nope' not found");
    const noCmd = await runCli(["sandbox", "exec", "someid"], env);
    expect(noCmd.code).toBe(2);
  });
});
