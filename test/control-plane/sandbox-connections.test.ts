// The manager's side of a pause, per runtime policy (Instance.pauseConnections),
// on a real AgentPool and real Unix sockets. The instance is a stand-in (named
// so): only its pause/resume calls and its policy value matter here.
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { SandboxConnections } from "../../control-plane/manager/sandbox-connections.js";
import type { Instance, PauseConnections } from "../../control-plane/runtimes/runtime.js";
import { AgentPool, dialHybridVsock } from "../../control-plane/transport/hybrid-vsock.js";
import { recorder } from "../helpers/vsock-recorder.js";

const log = pino({ level: "silent" });
const tick = (ms = 100) => new Promise((r) => setTimeout(r, ms));

/** A stand-in instance: records pause/resume calls, has the given policy. */
function fakeInstance(policy: PauseConnections | undefined, calls: string[]): Instance {
  return {
    sandboxId: "sbx",
    socketPath: "/nonexistent",
    persisted: {},
    pauseConnections: policy,
    pause: async () => void calls.push("pause"),
    resume: async () => void calls.push("resume"),
    kill: async () => undefined,
    alive: async () => true,
    stats: async () => ({ cpuCount: 1, cpuUsedPct: 0, memUsedBytes: 0, memTotalBytes: 0, diskUsedBytes: 0, diskTotalBytes: 0 }),
    onExit: () => undefined,
  };
}

describe("SandboxConnections (what a pause does to the host's connections, per runtime policy)", () => {
  it("quiet: own streams closed and the gate held before the pause; nothing reaches the sandbox until the resume", async () => {
    const srv = await recorder();
    const pool = new AgentPool();
    const closed: string[] = [];
    const conns = new SandboxConnections(pool, log, async (id) => void closed.push(id));
    const inst = fakeInstance("quiet", []);
    const s = await dialHybridVsock(srv.path, 49983, 5_000, pool.gate("sbx"));
    await conns.beforePause("sbx", inst);
    expect(closed).toEqual(["sbx"]);
    s.write("while-paused;");
    const dialing = dialHybridVsock(srv.path, 49983, 5_000, pool.gate("sbx"));
    await tick(300);
    expect(srv.seen).toEqual([]);
    expect(srv.dials()).toBe(1);
    conns.afterResume("sbx", inst);
    (await dialing).destroy();
    await tick();
    expect(srv.seen.join("")).toContain("while-paused;");
    expect(srv.dials()).toBe(2);
    s.destroy();
    pool.destroy();
    srv.close();
  });

  it("quiet: a failed pause lets held traffic through (the sandbox runs on)", async () => {
    const srv = await recorder();
    const pool = new AgentPool();
    const conns = new SandboxConnections(pool, log);
    const s = await dialHybridVsock(srv.path, 49983, 5_000, pool.gate("sbx"));
    await conns.beforePause("sbx", fakeInstance("quiet", []));
    s.write("held;");
    await tick(200);
    expect(srv.seen).toEqual([]);
    conns.pauseFailed("sbx");
    await tick();
    expect(srv.seen).toEqual(["held;"]);
    s.destroy();
    pool.destroy();
    srv.close();
  });

  it("keep and drop never hold traffic; closeWhilePaused only runs a quiet VM with live connections", async () => {
    const srv = await recorder();
    const pool = new AgentPool();
    const conns = new SandboxConnections(pool, log, async () => {
      throw new Error("own streams are only closed for quiet");
    });
    const s = await dialHybridVsock(srv.path, 49983, 5_000, pool.gate("sbx"));
    for (const policy of [undefined, "keep", "drop"] as const) {
      const calls: string[] = [];
      await conns.beforePause("sbx", fakeInstance(policy, calls));
      s.write(`${policy};`);
      await conns.closeWhilePaused("sbx", fakeInstance(policy, calls));
      expect(calls).toEqual([]);
    }
    await tick();
    expect(srv.seen.join("")).toBe("undefined;keep;drop;");

    const calls: string[] = [];
    const quiet = fakeInstance("quiet", calls);
    conns.adoptedPaused("sbx", quiet); // a restarted server found it paused: held
    await conns.closeWhilePaused("sbx", quiet);
    expect(calls).toEqual(["resume", "pause"]);
    expect(s.destroyed).toBe(true);
    expect(pool.liveCount("sbx")).toBe(0);
    pool.destroy();
    srv.close();
  });
});
