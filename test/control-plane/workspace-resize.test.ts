import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { workspaceClient } from "../helpers/workspace.js";

// The workspace API's session resize (what the dashboard's terminal sends when its window changes): the
// PTY of a running interactive shell takes the new size, as `stty size` inside it shows.

describe("workspace sessions: resize", () => {
  let cp: TestControlPlane;
  let call: ReturnType<typeof workspaceClient>;

  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 0 });
    call = workspaceClient(cp.workspaceUrl, cp.apiKey);
  });
  afterAll(async () => {
    await cp?.close();
  });

  /** Types `stty size` and reads until its answer comes: [rows, cols]. */
  const sttySize = async (id: string, session: string): Promise<[number, number]> => {
    expect((await call("POST", `/sandboxes/${id}/exec/${session}/input`, { input: "stty size\n" })).status).toBe(200);
    let text = "";
    for (let i = 0; i < 40; i++) {
      const r = await call<{ output: string }>("GET", `/sandboxes/${id}/exec/${session}/output?wait_ms=500`);
      text += r.body.output;
      const m = /^(\d+) (\d+)\r?$/m.exec(text);
      if (m) return [Number(m[1]), Number(m[2])];
    }
    throw new Error(`no stty answer in: ${JSON.stringify(text)}`);
  };

  it("resizes a running session's PTY, refuses bad sizes and ended sessions", async () => {
    const sbx = await call<{ sandbox_id: string; runtime: string; state: string }>("POST", "/sandboxes", { vcpu_count: 2 });
    expect(sbx.status).toBe(201);
    expect(sbx.body.runtime).toBe(cp.runtime.name);
    expect(sbx.body.state).toBe("running");
    const id = sbx.body.sandbox_id;
    const started = await call("POST", `/sandboxes/${id}/exec/start`, { session_id: "term", cols: 100, rows: 30, working_dir: "/" });
    expect(started.status).toBe(200);
    expect(await sttySize(id, "term")).toEqual([30, 100]);

    const resized = await call("POST", `/sandboxes/${id}/exec/term/resize`, { cols: 72, rows: 21 });
    expect(resized.status).toBe(200);
    expect(resized.body).toEqual({ session_id: "term", cols: 72, rows: 21 });
    expect(await sttySize(id, "term")).toEqual([21, 72]);

    for (const bad of [{}, { cols: 0, rows: 10 }, { cols: 80 }, { cols: 80, rows: "24" }, { cols: 5000, rows: 10 }]) {
      const r = await call<{ error: string }>("POST", `/sandboxes/${id}/exec/term/resize`, bad);
      expect(r.status, JSON.stringify(bad)).toBe(400);
      expect(r.body.error).toBe("invalid_request");
    }
    expect((await call("POST", `/sandboxes/${id}/exec/nosuch/resize`, { cols: 80, rows: 24 })).status).toBe(404);
    expect((await call("DELETE", `/sandboxes/${id}/exec/term`)).status).toBe(200);
    const ended = await call<{ error: string }>("POST", `/sandboxes/${id}/exec/term/resize`, { cols: 80, rows: 24 });
    expect(ended.status).toBe(409);
    expect(ended.body.error).toBe("conflict");
    // The audit log has it, as any other workspace call.
    const audit = await fetch(`${cp.workspaceUrl}/audit?sandbox_id=${id}`, { headers: { "x-api-key": cp.apiKey } }).then((r) => r.text());
    expect(audit).toContain('"action":"POST /sandboxes/:id/exec/:session/resize"');
  });
});
