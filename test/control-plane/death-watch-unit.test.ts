// A VM's death is reported only after what it held on the host is released
// (runtimes/death-watch.ts reportAfter): a caller that stops its process on
// the news must not leave a tap behind.
import { describe, expect, it } from "vitest";
import { DeathWatch } from "../../control-plane/runtimes/death-watch.js";

describe("DeathWatch.reportAfter", () => {
  it("reports once the clean-up settles, once, and is over meanwhile", async () => {
    const w = new DeathWatch(60_000, () => undefined);
    const events: string[] = [];
    w.onExit((r) => events.push(`exit: ${r}`));
    let release!: () => void;
    const cleanup = new Promise<void>((r) => (release = r)).then(() => void events.push("released"));
    w.reportAfter(cleanup, "QEMU was killed");
    expect(w.over).toBe(true); // a second poll does not report again meanwhile
    w.report("a second death");
    w.reportAfter(Promise.resolve(), "a third");
    await new Promise((r) => setTimeout(r, 10));
    expect(events).toEqual([]);
    release();
    await cleanup;
    await new Promise((r) => setImmediate(r));
    expect(events).toEqual(["released", "exit: QEMU was killed"]);
    expect(w.dead).toBe(true);
  });

  it("reports even when the clean-up fails; a kill meanwhile (stop) means no report", async () => {
    const failed = new DeathWatch(60_000, () => undefined);
    const seen: string[] = [];
    failed.onExit((r) => seen.push(r));
    failed.reportAfter(Promise.reject(new Error("ip link del failed")), "died");
    await new Promise((r) => setTimeout(r, 10));
    expect(seen).toEqual(["died"]);

    const killed = new DeathWatch(60_000, () => undefined);
    const none: string[] = [];
    killed.onExit((r) => none.push(r));
    let release!: () => void;
    killed.reportAfter(new Promise<void>((r) => (release = r)), "died");
    killed.stop();
    release();
    await new Promise((r) => setTimeout(r, 10));
    expect(none).toEqual([]);
  });
});
