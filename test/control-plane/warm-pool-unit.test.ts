// The warm pool's refill order, without a server: a take hands its sandbox out
// first and starts the replacement a moment later, so the replacement's start
// (the runtime's set-up in the server, then envd's Node start) does not run
// while the claimed sandbox gets its settings and its first command.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { WarmPool } from "../../control-plane/manager/warm-pool.js";
import type { Instance, Runtime } from "../../control-plane/runtimes/runtime.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "locale2b-warm-unit-"));
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
});
afterEach(() => {
  vi.useRealTimers();
  rmSync(dir, { recursive: true, force: true });
});

/** A runtime whose creates succeed at once (a stand-in: only the pool's order is under test). */
function countingRuntime(): { runtime: Runtime; started: string[] } {
  const started: string[] = [];
  const runtime = {
    name: "process",
    async create(spec: { sandboxId: string }): Promise<Instance> {
      started.push(spec.sandboxId);
      return { sandboxId: spec.sandboxId, socketPath: "", persisted: {}, onExit: () => {}, kill: async () => {} } as unknown as Instance;
    },
  } as unknown as Runtime;
  return { runtime, started };
}

function pool(size: number, runtime: Runtime): WarmPool {
  return new WarmPool({
    size,
    shape: { templateId: "base", cpuCount: 2, memoryMB: 512, diskSizeMB: 1024 },
    runtime: async () => runtime,
    dir: (id) => join(dir, id),
    waitReady: async () => {},
    log: pino({ level: "silent" }),
  });
}

describe("warm pool refills", () => {
  it("a take that leaves ready sandboxes starts its replacement only after a delay", async () => {
    const { runtime, started } = countingRuntime();
    const p = pool(2, runtime);
    p.fill();
    await vi.waitFor(() => expect(p.size).toBe(2));
    expect(started).toHaveLength(2);

    expect(p.take()?.id).toBe(started[0]);
    // The claim's /init and first command come now: no replacement starts meanwhile.
    await vi.advanceTimersByTimeAsync(50);
    expect(started).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(100);
    await vi.waitFor(() => expect(p.size).toBe(2));
    expect(started).toHaveLength(3);
    await p.close();
  });

  it("a take that empties the pool starts the replacement at once (the next create would miss)", async () => {
    const { runtime, started } = countingRuntime();
    const p = pool(1, runtime);
    p.fill();
    await vi.waitFor(() => expect(p.size).toBe(1));
    expect(p.take()?.id).toBe(started[0]);
    // Only promise jobs run here (vi.waitFor would advance the fake clock).
    for (let i = 0; i < 20 && started.length < 2; i++) await Promise.resolve();
    expect(started).toHaveLength(2);
    await vi.waitFor(() => expect(p.size).toBe(1));
    await p.close();
  });
});
