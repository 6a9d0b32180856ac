// Admission control for sandbox starts (manager/admission.ts) and its serve
// flags: a fixed number run, a bounded queue waits in arrival order, the rest
// are refused with `capacity` and a Retry-After.
import { describe, expect, it } from "vitest";
import { Admission, defaultAdmissionLimits } from "../../control-plane/manager/admission.js";
import { ControlPlaneError } from "../../control-plane/domain/errors.js";
import { parseServeArgs } from "../../control-plane/cli/serve-command.js";

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

const tick = () => new Promise((r) => setImmediate(r));

describe("Admission", () => {
  it("runs `concurrent` at once, queues `queue` in arrival order, refuses the next with capacity + Retry-After", async () => {
    const a = new Admission({ concurrent: 2, queue: 2 });
    const order: string[] = [];
    const gates = Array.from({ length: 4 }, deferred);
    const runs = gates.map((g, i) =>
      a.run(async () => {
        order.push(`start ${i}`);
        await g.promise;
        order.push(`end ${i}`);
        return i;
      }),
    );
    await tick();
    expect(order).toEqual(["start 0", "start 1"]);
    expect(a.stats()).toMatchObject({ running: 2, queued: 2, rejected: 0 });

    const refused = await a.run(async () => 99).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ControlPlaneError);
    expect((refused as ControlPlaneError).kind).toBe("capacity");
    expect((refused as ControlPlaneError).retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(a.stats().rejected).toBe(1);

    gates[1]!.resolve();
    await tick();
    // The freed slot goes to the first in the queue, not to whoever asks next.
    expect(order).toEqual(["start 0", "start 1", "end 1", "start 2"]);
    for (const g of gates) g.resolve();
    expect(await Promise.all(runs)).toEqual([0, 1, 2, 3]);
    expect(a.stats()).toMatchObject({ running: 0, queued: 0, rejected: 1 });
  });

  it("a background start (warm-pool refill) is never refused and yields its turn to every waiting create", async () => {
    const a = new Admission({ concurrent: 1, queue: 1 });
    const order: string[] = [];
    const first = deferred();
    const running = a.run(async () => {
      order.push("create 0");
      await first.promise;
    });
    const refill = a.run(async () => void order.push("refill"), { background: true });
    const queued = a.run(async () => void order.push("create 1"));
    await tick();
    expect(a.stats()).toMatchObject({ running: 1, queued: 1, rejected: 0 });
    first.resolve();
    await Promise.all([running, refill, queued]);
    expect(order).toEqual(["create 0", "create 1", "refill"]);
    expect(a.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("a failed start frees its slot", async () => {
    const a = new Admission({ concurrent: 1, queue: 0 });
    await expect(a.run(async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(await a.run(async () => "ok")).toBe("ok");
    expect(a.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("defaults to one start per CPU and 16 waiting per start slot", () => {
    expect(defaultAdmissionLimits({}, 2)).toEqual({ concurrent: 2, queue: 32 });
    expect(defaultAdmissionLimits({ concurrent: 3 }, 2)).toEqual({ concurrent: 3, queue: 48 });
    expect(defaultAdmissionLimits({ queue: 0 }, 0)).toEqual({ concurrent: 1, queue: 0 });
  });

  it("serve takes --max-concurrent-creates / --create-queue, or LOCALE2B_MAX_CONCURRENT_CREATES / LOCALE2B_CREATE_QUEUE", () => {
    const flags = parseServeArgs(["--max-concurrent-creates", "3", "--create-queue", "7"], {});
    expect(flags).toMatchObject({ maxConcurrentCreates: 3, createQueue: 7 });
    const env = parseServeArgs([], { LOCALE2B_MAX_CONCURRENT_CREATES: "4", LOCALE2B_CREATE_QUEUE: "0" });
    expect(env).toMatchObject({ maxConcurrentCreates: 4, createQueue: 0 });
    expect(() => parseServeArgs(["--max-concurrent-creates", "0"], {})).toThrow(/--max-concurrent-creates/);
  });
});
