import { randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { Sandbox } from "e2b";
import { afterAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import type { CgroupDriver, SandboxCgroup } from "../../control-plane/runtimes/process/cgroups.js";
import { vethUnsupported } from "../../control-plane/runtimes/net/veth.js";
import { FirecrackerRuntime } from "../../control-plane/runtimes/firecracker/firecracker-runtime.js";
import { tapName } from "../../control-plane/runtimes/firecracker/network.js";
import { tapUnsupported } from "../../control-plane/runtimes/qemu/tap.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";

// A server killed before it cleaned up (SIGKILL, a host crash) leaves its sandboxes' cgroups and
// network rules behind; the next start on the host removes them, and nothing any server still uses.
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

const noNet = vethUnsupported();
if (noNet) console.warn(`skipping the leftover network rules test: ${noNet}`);
const nft = (...args: string[]) => execFileSync("nft", args, { encoding: "utf8" });
const mapText = () => nft("list", "map", "inet", "locale2b", "sandboxes");
const chainExists = (chain: string) => nft("list", "chains", "inet").includes(`chain ${chain} `);

describe.skipIf(noNet !== undefined)("leftover sandbox network rules", () => {
  it("a server's start removes the rules of host devices that are gone, and keeps a live sandbox's", async () => {
    const first = await startTestControlPlane();
    servers.push(first);
    const live = await Sandbox.create("base", { apiKey: first.apiKey, apiUrl: first.url, sandboxUrl: first.url });
    const device = `l2b${live.sandboxId.slice(-12)}`;
    expect(existsSync(`/sys/class/net/${device}`), "the sandbox has its host device").toBe(true);
    expect(mapText()).toContain(`"${device}"`);

    // What a server killed before it released a sandbox leaves: an element for a device that is gone, and its chain;
    // and a chain no element names.
    const tag = randomBytes(4).toString("hex");
    const [gone, goneChain, orphanChain] = [`l2bgone${tag}`, `sbx_igone${tag}`, `sbx_iorphan${tag}`];
    execFileSync("nft", ["-f", "-"], {
      input: [`add chain inet locale2b ${goneChain}`, `add element inet locale2b sandboxes { "${gone}" : jump ${goneChain} }`, `add chain inet locale2b ${orphanChain}`].join("\n"),
    });
    expect(mapText()).toContain(`"${gone}"`);

    const second = await startTestControlPlane();
    servers.push(second);
    expect(mapText(), "the element of a device that is gone").not.toContain(`"${gone}"`);
    expect(chainExists(goneChain), "its chain").toBe(false);
    expect(chainExists(orphanChain), "a chain no element names").toBe(false);
    expect(mapText(), "a live sandbox's element stays").toContain(`"${device}"`);
    expect(chainExists(`sbx_${live.sandboxId}`), "and its chain").toBe(true);
    await live.kill();
  });
});

const noTap = tapUnsupported();
if (noTap) console.warn(`skipping the unrecorded tap test: ${noTap}`);

describe.skipIf(noTap !== undefined)("a tap a start made before the server died", () => {
  it("is released when the sandbox is adopted with no record of its VM (firecracker; qemu in test/vm)", async () => {
    const sandboxId = `itapleft${randomBytes(6).toString("hex")}`;
    const name = tapName(sandboxId);
    const dir = mkdtempSync(join(tmpdir(), "locale2b-tap-left-"));
    execFileSync("ip", ["tuntap", "add", "dev", name, "mode", "tap"]);
    try {
      expect(existsSync(`/sys/class/net/${name}`)).toBe(true);
      // No firecracker.json, no record in the store: the VMM was never spawned.
      expect(await new FirecrackerRuntime().adopt(sandboxId, dir, {}, pino({ level: "silent" }))).toBeUndefined();
      expect(existsSync(`/sys/class/net/${name}`), "the tap is released").toBe(false);
    } finally {
      if (existsSync(`/sys/class/net/${name}`)) execFileSync("ip", ["link", "del", name]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
