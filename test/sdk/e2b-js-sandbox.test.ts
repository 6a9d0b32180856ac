// @module-tag host-envd: runs envd on the host (test/helpers/accounts.ts)
// The real `e2b` JS SDK against a real envd: debug-mode setup, envd's access
// token, and upload/download URLs.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { AuthenticationError, Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rejection, startSdkSandbox, type SdkSandbox } from "../helpers/sdk.js";

let env: SdkSandbox;
let sandbox: Sandbox;

beforeAll(async () => {
  env = await startSdkSandbox();
  sandbox = env.sandbox;
});
afterAll(async () => {
  await env?.close();
});

/** Runs `fn` with the given environment variables, restoring them afterwards. */
async function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.keys(vars).map((k) => [k, process.env[k]] as const);
  for (const [k, v] of Object.entries(vars)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  try {
    return await fn();
  } finally {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe("debug mode (E2B_DEBUG=true + E2B_SANDBOX_URL)", () => {
  it("creates and connects without any control-plane call, and talks to envd", async () => {
    const apiRequests: string[] = [];
    const api: Server = createServer((req, res) => {
      apiRequests.push(`${req.method} ${req.url}`);
      res.writeHead(500).end();
    });
    await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
    try {
      const apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
      await withEnv({ E2B_API_URL: apiUrl }, async () => {
        const sbx = await Sandbox.create();
        expect(sbx.sandboxId).toBe("debug_sandbox_id");
        expect(await sbx.isRunning()).toBe(true);
        expect((await sbx.commands.run("echo via-debug")).stdout).toBe("via-debug\n");

        const again = await Sandbox.connect(sbx.sandboxId);
        expect((await again.commands.run("echo again")).stdout).toBe("again\n");
        expect(await sbx.kill()).toBe(true);
      });
      expect(apiRequests).toEqual([]);
    } finally {
      await new Promise((r) => api.close(r));
    }
  });

  it("works the same with the options instead of the environment", async () => {
    await withEnv({ E2B_DEBUG: undefined, E2B_SANDBOX_URL: undefined }, async () => {
      const sbx = await Sandbox.create({ debug: true, sandboxUrl: env.envd.url });
      expect(sbx.sandboxId).toBe("debug_sandbox_id");
      expect((await sbx.commands.run("echo via-options")).stdout).toBe("via-options\n");
      const path = join(env.envd.dir, "opts.txt");
      await sbx.files.write(path, "o");
      expect(await sbx.files.read(path)).toBe("o");
    });
  });
});

describe("envd access token", () => {
  it("without the token every RPC and /files call fails with AuthenticationError; /health stays open", async () => {
    const path = join(env.envd.dir, "guarded.txt");
    await sandbox.files.write(path, "before");
    env.envd.context.state.accessToken = "secret";
    try {
      const calls: [string, () => Promise<unknown>][] = [
        ["commands.run", () => sandbox.commands.run("echo hi")],
        ["commands.list", () => sandbox.commands.list()],
        ["commands.kill", () => sandbox.commands.kill(1)],
        ["pty.create", () => sandbox.pty.create({ cols: 80, rows: 24, onData: () => {} })],
        ["files.read", () => sandbox.files.read(path)],
        ["files.write", () => sandbox.files.write(path, "after")],
        ["files.list", () => sandbox.files.list(env.envd.dir)],
        ["files.getInfo", () => sandbox.files.getInfo(path)],
        ["files.exists", () => sandbox.files.exists(path)],
        ["files.makeDir", () => sandbox.files.makeDir(join(env.envd.dir, "nope"))],
        ["files.watchDir", () => sandbox.files.watchDir(env.envd.dir, () => {})],
      ];
      for (const [what, call] of calls) {
        const err = await rejection(call());
        expect({ what, name: err.name, isAuth: err instanceof AuthenticationError }).toEqual({
          what,
          name: "AuthenticationError",
          isAuth: true,
        });
      }
      expect(await sandbox.isRunning()).toBe(true);
    } finally {
      env.envd.context.state.accessToken = undefined;
    }
    // Nothing was written while locked out, and everything works again.
    expect(await sandbox.files.read(path)).toBe("before");
    expect((await sandbox.commands.run("echo hi")).stdout).toBe("hi\n");
  });
});

describe("upload and download URLs", () => {
  it("downloadUrl and uploadUrl are plain /files URLs that work with fetch", async () => {
    const path = join(env.envd.dir, "url.txt");
    await sandbox.files.write(path, "download me");

    const down = await sandbox.downloadUrl(path);
    expect(down.startsWith(`${env.envd.url}/files?`)).toBe(true);
    const res = await fetch(down);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("download me");

    const target = join(env.envd.dir, "uploaded.txt");
    const up = await sandbox.uploadUrl(target);
    const form = new FormData();
    form.append("file", new Blob(["uploaded via url"]), "uploaded.txt");
    const put = await fetch(up, { method: "POST", body: form });
    expect(put.status).toBe(200);
    expect(await sandbox.files.read(target)).toBe("uploaded via url");
  });

  it("uploadUrl(path) takes a 'file' part without a filename, as E2B's SDK tests post it", async () => {
    const target = join(env.envd.dir, "from-string.txt");
    const form = new FormData();
    form.append("file", "text");
    const put = await fetch(await sandbox.uploadUrl(target), { method: "POST", body: form });
    expect(put.status).toBe(200);
    expect(await put.json()).toEqual([{ path: target, name: "from-string.txt", type: "file" }]);
    expect(await sandbox.files.read(target)).toBe("text");

    // uploadUrl() without a path: nowhere to put a part without a filename.
    const nowhere = await fetch(await sandbox.uploadUrl(), { method: "POST", body: form });
    expect(nowhere.status).toBe(400);
    expect(((await nowhere.json()) as { message: string }).message).toMatch(/add \?path=/);
  });
});
