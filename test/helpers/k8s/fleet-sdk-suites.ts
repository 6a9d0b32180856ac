// The E2B SDKs through the fleet's Kubernetes Service, pointed at it as a user points them: only
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY (the Service's NodePort on node1's address; kube-proxy sends
// each connection to either API pod). Defined inside test/k8s/fleet.test.ts, on its cluster, before its
// fault tests:
// - the JS SDK's envd suite (test/helpers/sdk-envd-suite.ts: streamed output, stdin, PTY, files up to
//   64 MiB, watch, signed URLs) on a sandbox placed on node2, so every call crosses a node;
// - the JS SDK's lifecycle across nodes: Sandbox.list paging over both nodes' sandboxes, pause and connect
//   (resume) on each node, getHost to a server in a sandbox on each node, kill (fleet.test.ts itself checks
//   that a burst of creates lands on both nodes);
// - the Python SDK (sync and async): test/python's own tests, run with pytest against the Service
//   (conftest.py's LOCALE2B_PY_SERVER_URL), a selection that keeps the cluster test short.
import { spawn } from "node:child_process";
import http from "node:http";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PYTHON_TESTS, pythonSdkMissing, pythonSdkPython } from "../python-sdk.js";
import { setEnv, waitFor } from "../sdk.js";
import { defineEnvdSuite } from "../sdk-envd-suite.js";
import type { K8sFleet } from "./fleet.js";

export interface FleetTarget {
  fleet: K8sFleet;
  /** The node a sandbox runs on, as the fleet's store has it. */
  nodeOf(id: string): Promise<string | undefined>;
}

/** test/python's tests run through the Service: sync and async, commands, PTY, files, watch, lifecycle. */
const PYTEST_SELECTION = [
  "test_commands.py",
  "test_pty.py",
  "test_async.py",
  "test_files.py::test_write_and_read_text",
  "test_files.py::test_list_make_dir_and_depth",
  "test_files.py::test_signed_urls_work_without_sandbox_headers",
  "test_files.py::test_watch_dir_polling",
  "test_sandbox.py::test_list_filters_by_metadata_and_state",
  "test_sandbox.py::test_connect_to_running_sandbox",
  "test_sandbox.py::test_pause_and_connect_resumes_with_files_and_processes",
  "test_sandbox.py::test_get_host_reaches_a_server_in_the_sandbox",
  "test_sandbox.py::test_kill",
];

/** A request with a Host of our choosing (getHost's `<port>-<id>.<domain>`), as a browser on wildcard DNS sends it. */
function getWithHost(base: string, host: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { headers: { host } }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode!, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** Runs pytest to its end; its output, for a failure's message. */
function pytest(args: string[], env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(pythonSdkPython(), ["-m", "pytest", ...args], { cwd: PYTHON_TESTS, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (output += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (output += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, output }));
  });
}

export function defineFleetSdkSuites(target: () => FleetTarget): void {
  const sdkEnv = () => {
    const { fleet } = target();
    return { E2B_API_URL: fleet.service, E2B_SANDBOX_URL: fleet.service, E2B_API_KEY: fleet.apiKey };
  };
  /**
   * Creates until one lands on `node`. Placement takes the least loaded node, and the nodes' loads may differ by
   * what earlier tests left (and two replicas' bursts overshoot, each counting only its own placements): the
   * creates that land elsewhere are kept until then, so `node` becomes the least loaded within a few; then killed.
   */
  const createOn = async (node: string, opts: Parameters<typeof Sandbox.create>[1] = {}): Promise<Sandbox> => {
    const elsewhere: Sandbox[] = [];
    try {
      for (let i = 0; i < 12; i++) {
        const s = await Sandbox.create("base", { timeoutMs: 600_000, ...opts });
        if ((await target().nodeOf(s.sandboxId)) === node) return s;
        elsewhere.push(s);
      }
      throw new Error(`12 creates through the Service, none placed on ${node}`);
    } finally {
      for (const s of elsewhere) await s.kill().catch(() => false);
    }
  };

  describe("the E2B JS SDK's envd suite through the Service, on a sandbox on node2", () => {
    defineEnvdSuite({
      start: async () => ({ url: target().fleet.service, sdkEnv: sdkEnv(), close: async () => undefined }),
      create: (opts) => createOn("node2", opts),
      sandboxTimeoutMs: 600_000,
      timeoutMs: 120_000,
    });
  });

  describe("the E2B JS SDK's lifecycle through the Service, across both nodes", () => {
    let restore = () => {};
    const made: Sandbox[] = [];
    beforeAll(() => {
      restore = setEnv({ ...sdkEnv(), E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    });
    afterAll(async () => {
      for (const s of made) await s.kill().catch(() => false);
      restore();
    });

    it("Sandbox.list pages through both nodes' sandboxes; kill", async () => {
      const tag = `k8s-list-${Date.now()}`;
      const metadata = { tag };
      const boxes = [await createOn("node1", { metadata }), await createOn("node2", { metadata })];
      boxes.push(...(await Promise.all([0, 1].map(() => Sandbox.create("base", { metadata, timeoutMs: 600_000 })))));
      made.push(...boxes);
      const pager = Sandbox.list({ query: { metadata: { tag } }, limit: 3 });
      const pages: string[][] = [];
      while (pager.hasNext) pages.push((await pager.nextItems()).map((s) => s.sandboxId));
      expect(pages.map((p) => p.length)).toEqual([3, 1]);
      expect(pages.flat().sort()).toEqual(boxes.map((b) => b.sandboxId).sort());

      for (const b of boxes) expect(await b.kill()).toBe(true);
      expect(await Sandbox.kill(boxes[0]!.sandboxId)).toBe(false); // already gone
      expect(await Sandbox.list({ query: { metadata: { tag } } }).nextItems()).toEqual([]);
    });

    for (const node of ["node1", "node2"]) {
      it(`pause, then connect resumes a sandbox on ${node} with its files and background process`, async () => {
        const s = await createOn(node);
        made.push(s);
        await s.files.write("/home/user/before-pause.txt", `kept on ${node}`);
        const sleeper = await s.commands.run("sleep 600", { background: true, timeoutMs: 0 });
        await sleeper.disconnect();
        expect(await s.pause()).toBe(true);
        expect((await Sandbox.getInfo(s.sandboxId)).state).toBe("paused");
        expect(await Sandbox.pause(s.sandboxId)).toBe(false); // already paused

        const resumed = await Sandbox.connect(s.sandboxId);
        expect((await Sandbox.getInfo(s.sandboxId)).state).toBe("running");
        expect(await target().nodeOf(s.sandboxId)).toBe(node); // resumed where its files are
        expect(await resumed.files.read("/home/user/before-pause.txt")).toBe(`kept on ${node}`);
        expect((await resumed.commands.list()).map((p) => p.pid)).toContain(sleeper.pid);
      });

      it(`getHost: a server in a sandbox on ${node}, through the Service by its Host`, async () => {
        const s = await createOn(node);
        made.push(s);
        const port = node === "node1" ? 8123 : 8124;
        await s.files.write("/home/user/site/index.html", `served from ${node}`);
        const server = await s.commands.run(`python3 -m http.server ${port} --bind 127.0.0.1 --directory /home/user/site`, { background: true, timeoutMs: 0 });
        const host = s.getHost(port);
        expect(host).toBe(`${port}-${s.sandboxId}.${target().fleet.domain}`);
        let last = { status: 0, body: "" };
        await waitFor(async () => (last = await getWithHost(target().fleet.service, host, "/index.html")).status === 200, () => `the sandbox's server on port ${port}; last: ${JSON.stringify(last)}`);
        expect(last.body).toBe(`served from ${node}`);
        await server.kill();
        await waitFor(async () => (await getWithHost(target().fleet.service, host, "/")).status === 502, "502 once the server is gone");
      });
    }
  });

  const noPython = pythonSdkMissing();
  describe.skipIf(noPython !== undefined)(`the E2B Python SDK, sync and async, through the Service (test/python)${noPython ? ` [skipped: ${noPython}]` : ""}`, () => {
    it(`pytest ${PYTEST_SELECTION.length} selections of test/python against the Service`, async () => {
      const { fleet } = target();
      const r = await pytest(["-q", ...PYTEST_SELECTION], {
        LOCALE2B_PY_SERVER_URL: fleet.service,
        LOCALE2B_PY_API_KEY: fleet.apiKey,
        LOCALE2B_PY_DOMAIN: fleet.domain,
      });
      const summary = r.output.trim().split("\n").at(-1) ?? "";
      console.log(`Python e2b SDK through the Service: ${summary}`);
      expect(r.code, r.output.slice(-6000)).toBe(0);
      expect(summary).toMatch(/\d+ passed/);
      expect(summary).not.toMatch(/skipped|failed|error/);
    }, 600_000);
  });
}
