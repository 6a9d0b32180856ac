import { randomBytes } from "node:crypto";
import { utimesSync } from "node:fs";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import type { CgroupDriver, SandboxCgroup } from "../../control-plane/runtimes/process/cgroups.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";

// A server killed before it cleaned up (SIGKILL, a host crash) leaves its sandboxes' cgroups behind;
// the next start on the host removes the empty old ones, and nothing any server still uses.
const driver: CgroupDriver | undefined = process.getuid?.() === 0 ? (await new ProcessRuntime().capabilities()).cgroups : undefined;
const why = process.getuid?.() !== 0 ? "needs root (sandbox cgroups)" : "this host gives sandboxes no cgroups";
if (!driver) console.warn(`skipping leftover cgroup tests: ${why}`);

const servers: TestControlPlane[] = [];
const made: SandboxCgroup[] = [];
afterAll(async () => {
  for (const g of made) await g.remove().catch(() => undefined);
  for (const s of servers) await s.close().catch(() => undefined);
});

/** Makes every directory of the group look `ageMs` old. */
function age(group: SandboxCgroup, ageMs: number): void {
  const rec = group.record;
  const when = new Date(Date.now() - ageMs);
  for (const dir of rec.kind === "v1" ? Object.values(rec.dirs) : [rec.dir]) utimesSync(dir!, when, when);
}

const limits = { memoryBytes: 256 * 1024 * 1024, cpuCount: 1, pidsMax: 64 };

describe.skipIf(!driver)("leftover sandbox cgroups", () => {
  it("a server's start removes empty old groups, and keeps a live sandbox's group and one just made", async () => {
    const first = await startTestControlPlane();
    servers.push(first);
    const opts = { apiKey: first.apiKey, apiUrl: first.url, sandboxUrl: first.url };
    const live = await Sandbox.create("base", opts);
    const liveGroup = driver!.find(live.sandboxId);
    expect(liveGroup, "the sandbox runs in its own group").toBeDefined();
    age(liveGroup!, 3600_000);

    const tag = randomBytes(4).toString("hex");
    const leftover = driver!.create(`ileftover${tag}`, limits);
    made.push(leftover);
    age(leftover, 3600_000);
    const fresh = driver!.create(`ifresh${tag}`, limits);
    made.push(fresh);

    const second = await startTestControlPlane();
    servers.push(second);

    expect(leftover.exists(), "an empty group made an hour ago is gone").toBe(false);
    expect(fresh.exists(), "an empty group made a moment ago (a start in progress) stays").toBe(true);
    expect(liveGroup!.exists(), "a group with a sandbox in it stays, however old").toBe(true);
    expect(liveGroup!.pids().length).toBeGreaterThan(0);
    expect((await live.commands.run("echo still here")).stdout).toBe("still here\n");
    await live.kill();
    expect(liveGroup!.exists(), "a killed sandbox's group goes with it").toBe(false);
  });
});
