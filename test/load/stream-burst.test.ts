// Many concurrent Start streams through the control plane's envd proxy with
// the unmodified e2b SDK: every command is accepted (no handshake time-out,
// no "sandbox is probably not running" for a live sandbox), and every
// stream's output arrives complete and in order. Sized to run in CI on two
// cores in well under a minute.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv } from "../helpers/sdk.js";

/** `lines` numbered lines tagged with the stream's id, with a pause half way so output comes in pieces. */
function script(tag: string, lines: number): string {
  const half = Math.floor(lines / 2);
  return `for i in $(seq 1 ${half}); do echo "${tag}:$i"; done; sleep 0.2; for i in $(seq ${half + 1} ${lines}); do echo "${tag}:$i"; done`;
}

function expected(tag: string, lines: number): string {
  return Array.from({ length: lines }, (_, i) => `${tag}:${i + 1}\n`).join("");
}

describe("bursts of command streams", () => {
  let cp: TestControlPlane;
  let restoreEnv = () => {};

  beforeAll(async () => {
    cp = await startTestControlPlane({ warmPool: 0 });
    restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  });
  afterAll(async () => {
    restoreEnv();
    await cp?.close();
  });

  it("many concurrent commands in one sandbox all complete, each output whole and in order", async () => {
    const sbx = await Sandbox.create("base", { timeoutMs: 300_000 });
    try {
      const n = 300;
      const lines = 20;
      const chunks = Array.from({ length: n }, () => [] as string[]);
      const results = await Promise.allSettled(
        Array.from({ length: n }, (_, i) =>
          sbx.commands.run(script(`c${i}`, lines), { onStdout: (d) => void chunks[i]!.push(d), timeoutMs: 240_000 }),
        ),
      );
      const failures = results.flatMap((r, i) => (r.status === "rejected" ? [`c${i}: ${String(r.reason)}`] : []));
      expect(failures.slice(0, 5), `${failures.length} of ${n} failed`).toEqual([]);
      results.forEach((r, i) => {
        const out = (r as PromiseFulfilledResult<{ stdout: string; exitCode: number }>).value;
        expect(out.exitCode).toBe(0);
        expect(out.stdout).toBe(expected(`c${i}`, lines));
        expect(chunks[i]!.join("")).toBe(expected(`c${i}`, lines));
      });
      // The sandbox is as alive as before the burst.
      expect((await sbx.commands.run("echo still here")).stdout).toBe("still here\n");
    } finally {
      await sbx.kill();
    }
  });

  it("concurrent streams across several sandboxes all complete, each output whole and in order", async () => {
    const boxes = await Promise.all(Array.from({ length: 4 }, () => Sandbox.create("base", { timeoutMs: 300_000 })));
    try {
      const perBox = 100;
      const lines = 30;
      const runs = boxes.flatMap((sbx, b) =>
        Array.from({ length: perBox }, async (_, i) => {
          const tag = `s${b}-${i}`;
          const pieces: string[] = [];
          const handle = await sbx.commands.run(script(tag, lines), { background: true, onStdout: (d) => void pieces.push(d) });
          const res = await handle.wait();
          return { tag, res, streamed: pieces.join("") };
        }),
      );
      const results = await Promise.allSettled(runs);
      const failures = results.flatMap((r) => (r.status === "rejected" ? [String(r.reason)] : []));
      expect(failures.slice(0, 5), `${failures.length} of ${runs.length} failed`).toEqual([]);
      for (const r of results) {
        const { tag, res, streamed } = (r as PromiseFulfilledResult<{ tag: string; res: { stdout: string; exitCode: number }; streamed: string }>).value;
        expect(res.exitCode).toBe(0);
        expect(streamed).toBe(expected(tag, lines));
        expect(res.stdout).toBe(expected(tag, lines));
      }
    } finally {
      await Promise.all(boxes.map((b) => b.kill()));
    }
  });
});
