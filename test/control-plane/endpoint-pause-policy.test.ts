// What a pause does to the host's connections to a sandbox, per runtime policy
// (Instance.pauseConnections, acted on by the sandbox's Endpoint), on a real
// LocalEndpoint and real Unix sockets. The VM is a stand-in (named so): only
// its pause/resume calls matter here.
import { describe, expect, it } from "vitest";
import type { Pausable, PausePolicy } from "../../control-plane/transport/endpoint.js";
import { LocalEndpoint } from "../../control-plane/transport/local-endpoint.js";
import { recorder } from "../helpers/vsock-recorder.js";

const tick = (ms = 100) => new Promise((r) => setTimeout(r, ms));

/** A stand-in VM: records pause/resume calls. */
function fakeVm(calls: string[]): Pausable {
  return { pause: async () => void calls.push("pause"), resume: async () => void calls.push("resume") };
}

describe("Endpoint pause policy (what a pause does to the host's connections)", () => {
  it("quiet: own streams closed and the gate held before the pause; nothing reaches the sandbox until the resume", async () => {
    const srv = await recorder();
    const ep = new LocalEndpoint("sbx", srv.path, "quiet");
    const closed: string[] = [];
    const s = await ep.dial(49983);
    await ep.beforePause(async () => void closed.push("sbx"));
    expect(closed).toEqual(["sbx"]);
    s.write("while-paused;");
    const dialing = ep.dial(49983);
    await tick(300);
    expect(srv.seen).toEqual([]);
    expect(srv.dials()).toBe(1);
    ep.afterResume();
    (await dialing).destroy();
    await tick();
    expect(srv.seen.join("")).toContain("while-paused;");
    expect(srv.dials()).toBe(2);
    s.destroy();
    ep.close();
    srv.close();
  });

  it("quiet: a failed pause lets held traffic through (the sandbox runs on)", async () => {
    const srv = await recorder();
    const ep = new LocalEndpoint("sbx", srv.path, "quiet");
    const s = await ep.dial(49983);
    await ep.beforePause(async () => undefined);
    s.write("held;");
    await tick(200);
    expect(srv.seen).toEqual([]);
    ep.pauseFailed();
    await tick();
    expect(srv.seen).toEqual(["held;"]);
    s.destroy();
    ep.close();
    srv.close();
  });

  it("keep and drop never hold traffic; closeWhilePaused only runs a quiet VM with live connections", async () => {
    const srv = await recorder();
    const ownStreams = async () => {
      throw new Error("own streams are only closed for quiet");
    };
    for (const policy of [undefined, "keep", "drop"] as (PausePolicy | undefined)[]) {
      const ep = new LocalEndpoint("sbx", srv.path, policy);
      const s = await ep.dial(49983);
      const calls: string[] = [];
      await ep.beforePause(ownStreams);
      s.write(`${policy};`);
      expect(await ep.closeWhilePaused(fakeVm(calls))).toBe(false);
      expect(calls).toEqual([]);
      await tick();
      s.destroy();
      ep.close();
    }
    expect(srv.seen.filter((x) => x !== "<end>").join("")).toBe("undefined;keep;drop;");

    const ep = new LocalEndpoint("sbx", srv.path, "quiet");
    const s = await ep.dial(49983);
    const calls: string[] = [];
    ep.adoptedPaused(); // a restarted server found it paused: held
    expect(await ep.closeWhilePaused(fakeVm(calls))).toBe(true);
    expect(calls).toEqual(["resume", "pause"]);
    expect(s.destroyed).toBe(true);
    expect(ep.liveCount).toBe(0);
    ep.close();
    srv.close();
  });

  it("drop: pooled connections are dropped before the pause and again after the resume", async () => {
    const srv = await recorder();
    const ep = new LocalEndpoint("sbx", srv.path, "drop");
    const before = ep.agent();
    await ep.beforePause(async () => undefined);
    const during = ep.agent();
    expect(during).not.toBe(before);
    ep.afterResume();
    expect(ep.agent()).not.toBe(during);
    ep.close();
    srv.close();
  });
});
