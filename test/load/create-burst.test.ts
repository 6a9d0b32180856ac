// Bursts of creates beyond what the host starts at once: each create is
// either started (201), queued until a start slot frees (201, later), or
// refused at once with 429 + Retry-After when the bounded queue is full;
// never a 500 from a readiness deadline that queueing ate. A small configured
// capacity (1 start at a time, 2 waiting) keeps it fast; the runtime's starts
// are held at a gate so the burst's order is fixed, not a race with the clock.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import type { Instance, InstanceSpec, Runtime } from "../../control-plane/runtimes/runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { setEnv, waitFor } from "../helpers/sdk.js";

/** A runtime whose starts wait at a gate the test opens. */
class GatedRuntime {
  entered = 0;
  private open!: () => void;
  private gate!: Promise<void>;

  constructor(readonly inner: Runtime) {
    this.close();
  }

  /** Holds every start from now on until release(). */
  close(): void {
    this.entered = 0;
    this.gate = new Promise((r) => (this.open = r));
  }

  release(): void {
    this.open();
  }

  runtime(): Runtime {
    return new Proxy(this.inner, {
      get: (target, prop) => {
        if (prop === "create") {
          return async (spec: InstanceSpec): Promise<Instance> => {
            this.entered++;
            await this.gate;
            return target.create(spec);
          };
        }
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
  }
}

describe("create bursts beyond the host's start capacity", () => {
  let cp: TestControlPlane;
  let gated: GatedRuntime;
  let restoreEnv = () => {};

  beforeAll(async () => {
    gated = new GatedRuntime(new ProcessRuntime());
    cp = await startTestControlPlane({
      runtime: gated.runtime(),
      templateRuntime: () => undefined,
      warmPool: 0,
      admission: { concurrent: 1, queue: 2 },
    });
    restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  });
  afterAll(async () => {
    restoreEnv();
    gated?.release();
    await cp?.close();
  });

  it("starts one, queues two, answers the rest 429 with Retry-After at once; none 500", async () => {
    const n = 8;
    const answers: { status: number; retryAfter: string | null; body: { code?: number; message?: string } }[] = [];
    const creates = Array.from({ length: n }, async () => {
      const res = await fetch(`${cp.url}/v2/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
        body: JSON.stringify({ templateID: "base", timeout: 120 }),
      });
      const answer = { status: res.status, retryAfter: res.headers.get("retry-after"), body: (await res.json()) as { code?: number; message?: string } };
      answers.push(answer);
      return answer;
    });
    // The refusals come while the admitted start is still held (a server
    // without admission control lets all eight into the runtime instead).
    await waitFor(() => answers.length >= n - 3 || gated.entered >= n, () => `${answers.length} answers, ${gated.entered} starts`);
    const early = answers.map((a) => a.status);
    const enteredWhileHeld = gated.entered;
    gated.release();
    const all = await Promise.all(creates);

    expect(enteredWhileHeld).toBe(1);
    expect(early).toEqual(Array(n - 3).fill(429));
    const statuses = all.map((a) => a.status).sort();
    expect(statuses).toEqual([...Array(3).fill(201), ...Array(n - 3).fill(429)]);
    for (const a of all.filter((x) => x.status === 429)) {
      expect(Number(a.retryAfter)).toBeGreaterThanOrEqual(1);
      expect(a.body.code).toBe(429);
      expect(a.body.message).toMatch(/--create-queue/);
    }

    const metrics = await (await fetch(`${cp.url}/metrics`)).text();
    expect(metrics).toMatch(/^locale2b_create_concurrency_limit 1$/m);
    expect(metrics).toMatch(/^locale2b_create_queue_limit 2$/m);
    expect(metrics).toMatch(/^locale2b_creates_rejected_total 5$/m);
    expect(metrics).toMatch(/^locale2b_creates_queued 0$/m);
    expect(metrics).toMatch(/^locale2b_creates_in_progress 0$/m);

    for (const s of cp.manager.list()) await cp.manager.kill(s.id);
  });

  it("the e2b SDK waits out a 429's Retry-After and retries: every create of a burst succeeds", async () => {
    gated.close();
    const rejectedBefore = cp.manager.admissionStats().rejected;
    const n = 5;
    const creates = Array.from({ length: n }, () => Sandbox.create("base", { timeoutMs: 120_000 }));
    // Hold the starts until the server has refused some of the burst.
    await waitFor(
      () => cp.manager.admissionStats().rejected > rejectedBefore || gated.entered >= n,
      () => `a refusal (${gated.entered} starts)`,
    );
    gated.release();
    const results = await Promise.allSettled(creates);
    const failures = results.flatMap((r) => (r.status === "rejected" ? [String(r.reason)] : []));
    expect(failures).toEqual([]);
    expect(cp.manager.admissionStats().rejected).toBeGreaterThan(rejectedBefore);
    const sandboxes = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
    // Each one is a working sandbox.
    const outs = await Promise.all(sandboxes.map((s, i) => s.commands.run(`echo ${i}`)));
    expect(outs.map((o) => o.stdout)).toEqual(sandboxes.map((_, i) => `${i}\n`));
    await Promise.all(sandboxes.map((s) => s.kill()));
  });
});
