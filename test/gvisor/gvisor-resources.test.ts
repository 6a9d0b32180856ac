// A gVisor sandbox's limits fail the offender, as a kernel's would, never the
// sandbox: a memory hog, a fork bomb and a thread
// bomb, /dev/shm, /run and the disk filled, each as `user` and as root, with
// the real JS SDK. After each, the sandbox answers its next command and a
// neighbour sandbox answers too (a burst of small processes over the memory
// limit may still end its sandbox: known, asserted as such). Then pause and resume, many times over, with
// a process writing a counter: no count is lost. The probes are the process
// runtime's (test/helpers/resource-probes.ts).
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GvisorRuntime } from "../../control-plane/runtimes/gvisor/gvisor-runtime.js";
import type { GvisorInstance } from "../../control-plane/runtimes/gvisor/instance.js";
import { openCgroup } from "../../control-plane/runtimes/process/cgroup-detect.js";
import type { CgroupRecord } from "../../control-plane/runtimes/process/cgroups.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { RUNSC_CONTAINS_BURSTS } from "../../control-plane/runtimes/gvisor/runsc.js";
import { gvisorMissing, runscDate } from "../helpers/gvisor.js";
import { fill, memoryBurst, memoryHog, processBomb, sh, threadBomb } from "../helpers/resource-probes.js";
import { setEnv, waitFor } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";
const TIMEOUT = 300_000;
/** The sandboxes' pids limit here (the default is 1024): small, so a bomb reaches it quickly on 2 shared cores. */
const PIDS_MAX = 256;
/**
 * Pause/resume cycles: the 50 the issue asks for with the runsc scripts/build-runsc.sh builds (a cycle,
 * checkpoint to disk then restore, takes about 0.5 s with it); 25 with an older one (2.5-4 s a cycle on
 * 2 shared cores). LOCALE2B_GVISOR_PAUSE_CYCLES sets the count.
 */
const CYCLES = Number(process.env.LOCALE2B_GVISOR_PAUSE_CYCLES ?? (!missing && runscDate() >= RUNSC_CONTAINS_BURSTS ? 50 : 25));
const both = ["user", "root"] as const;

let cp: TestControlPlane;
let restoreEnv = () => {};
let a: Sandbox;
let neighbour: Sandbox;

/** How many processes the kernel's OOM killer took in the sandbox's host cgroup. */
const instance = (s: Sandbox) => cp.manager["instances"].get(s.sandboxId) as GvisorInstance | undefined;

function oomKills(s: Sandbox): number {
  const inst = instance(s);
  if (!inst) return 0;
  return openCgroup((inst.persisted as { cgroup: CgroupRecord }).cgroup, s.sandboxId)?.oomKills() ?? 0;
}

async function bothAnswer(): Promise<void> {
  expect((await sh(a, "echo alive")).out).toBe("alive\n");
  expect((await sh(neighbour, "echo neighbour")).out).toBe("neighbour\n");
  expect((await cp.store.getSandbox(a.sandboxId))?.state).toBe("running");
}

beforeAll(async () => {
  if (missing) return;
  cp = await startTestControlPlane({ runtime: new GvisorRuntime({ imagesDir: testImagesDir(), pidsMax: PIDS_MAX }), imagesDir: testImagesDir() });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  [a, neighbour] = await Promise.all([Sandbox.create("base", { timeoutMs: 1_800_000 }), Sandbox.create("base", { timeoutMs: 1_800_000 })]);
}, TIMEOUT);

afterAll(async () => {
  restoreEnv();
  await cp?.close();
});

describe.skipIf(missing !== undefined)(`gvisor: a limit fails the offender, not the sandbox${why}`, { timeout: TIMEOUT }, () => {
  it.each(both)("as %s: a process allocating past the sandbox's memory is killed; envd, the init and the sandbox live", async (user) => {
    const before = oomKills(a);
    const r = await sh(a, `${memoryHog(1024)}; echo "exit $?"`, user);
    expect(r.out, r.out).not.toMatch(/^survived$/m);
    expect(oomKills(a)).toBeGreaterThan(before);
    expect(r.out).toMatch(/exit (137|1)\b|MemoryError|Killed/);
    await bothAnswer();
  });

  // With runsc 20240729 a burst may end its sandbox (docs/runtimes.md: the kernel goes on killing stubs faster
  // than that sentry frees the killed processes' memory, then takes the sentry; seen: 1 of 2 lived); with the runsc
  // scripts/build-runsc.sh builds, every burst tried lived (18 of 18, 10 of them at load 5-7). Its own sandbox, so an
  // end takes no other test with it.
  const contained = missing ? false : runscDate() >= RUNSC_CONTAINS_BURSTS;
  it(`a burst of small processes over the memory limit: the OOM killer takes some of them; the neighbour lives, and the sandbox lives${contained ? "" : " or is reported out of memory (runsc before 2026-09-05)"}`, async () => {
    const s = await Sandbox.create("base", { timeoutMs: 600_000 });
    try {
      const before = oomKills(s);
      await s.files.write("/tmp/burst.sh", memoryBurst());
      // A few processes of a burst whose stub was killed may never finish exiting (runsc 20240729 systrap),
      // so the shell waiting for them is given up on; its output goes to a file, which they hold open.
      await sh(s, "timeout -s KILL 40 bash /tmp/burst.sh > /tmp/burst.out 2>&1");
      // Alive, or ended and reported so: the record may still say running for a moment after the kernel took
      // the sentry (its death is noticed within a poll), so a sandbox that does not answer must come to be reported.
      const answers = () => sh(s, "echo alive").then((r) => r.out === "alive\n", () => false);
      const lived = (await cp.store.getSandbox(s.sandboxId))?.state === "running" && (await answers());
      console.log(`the burst: the sandbox ${lived ? "lived" : "ended"}; ${oomKills(s) - before} OOM kills in its cgroup; ${lived ? (await sh(s, "cat /tmp/burst.out")).out.trim() : ""}`);
      if (contained) expect(lived, "the sandbox lives through the burst (runsc from 2026-09-05 on)").toBe(true);
      if (lived) {
        expect(oomKills(s)).toBeGreaterThan(before);
      } else {
        await waitFor(async () => (await cp.store.getSandbox(s.sandboxId))?.state === "killed", "the sandbox that stopped answering to be reported dead");
        expect((await cp.store.getSandbox(s.sandboxId))!.endReason).toMatch(/ran out of memory \(\d+ MiB\)/);
      }
      await bothAnswer();
    } finally {
      await s.kill().catch(() => undefined);
    }
  });

  it.each(both)("as %s: a fork bomb stops at the pids limit with EAGAIN; the sandbox still starts processes", async (user) => {
    await a.files.write("/tmp/fork-bomb.py", processBomb);
    const r = await sh(a, "python3 /tmp/fork-bomb.py", user);
    const m = /stopped (\d+) (.*)/.exec(r.out);
    expect(m, r.out).not.toBeNull();
    // Children that died early (an exec, the OOM killer) free their pids for more forks: about the limit, never far past it.
    expect(Number(m![1])).toBeLessThan(PIDS_MAX + 64);
    expect(m![2]).toMatch(/Resource temporarily unavailable/);
    await bothAnswer();
  });

  it.each(both)("as %s: a thread bomb is refused new threads at the pids limit; the sandbox lives", async (user) => {
    await a.files.write("/tmp/thread-bomb.py", threadBomb);
    const r = await sh(a, "python3 /tmp/thread-bomb.py", user);
    const m = /stopped (\d+) (.*)/.exec(r.out);
    expect(m, r.out).not.toBeNull();
    // gVisor's pids cgroup lets a few tasks past pids.max before it refuses (root's bomb stopped at 266 of 256
    // in one run, at 802 of 800 by hand): about the limit, never far past it.
    expect(Number(m![1])).toBeLessThan(PIDS_MAX + 64);
    expect(m![2]).toMatch(/can't start new thread|Resource temporarily unavailable/);
    await bothAnswer();
  });

  it.each(both)("as %s: gVisor's cgroup files inside change only gVisor's kernel: the host cgroup's limits stay", async (user) => {
    const host = openCgroup((instance(a)!.persisted as { cgroup: CgroupRecord }).cgroup, a.sandboxId)!;
    const limit = host.memoryLimit();
    const r = await sh(a, "echo max > /sys/fs/cgroup/pids/pids.max; echo $?; cat /sys/fs/cgroup/pids/pids.max; echo 999999999999 > /sys/fs/cgroup/memory/memory.limit_in_bytes 2>&1; ls /sys/fs/cgroup", user);
    if (user === "user") expect(r.out).toMatch(/Permission denied|Read-only/);
    expect(host.memoryLimit()).toBe(limit);
    expect(limit).toBe(512 << 20);
    // Put back for the tests after this one (root could lift its own sandbox's limit, never the host's).
    await sh(a, `echo ${PIDS_MAX} > /sys/fs/cgroup/pids/pids.max`, "root");
    await bothAnswer();
  });

  it.each(both)("as %s: filling /dev/shm fails the writer with ENOSPC; the sandbox lives", async (user) => {
    const r = await sh(a, fill("/dev/shm/big", 900), user);
    expect(r.out).toMatch(/No space left on device/);
    await bothAnswer();
  });

  it("as root: /run (tmpfs) is bounded too: filling it is ENOSPC, not the sandbox's memory", async () => {
    const r = await sh(a, fill("/run/big", 900), "root");
    expect(r.out).toMatch(/No space left on device/);
    await bothAnswer();
  });

  it.each(both)("as %s: filling the disk is ENOSPC inside; the sandbox goes on once space is freed", async (user) => {
    const dir = user === "root" ? "/root" : "/home/user";
    const r = await sh(a, fill(`${dir}/big`, 1600), user);
    expect(r.out).toMatch(/No space left on device/);
    expect((await sh(a, `echo alive > ${dir}/ok && cat ${dir}/ok`, user)).out).toBe("alive\n");
    await bothAnswer();
  });
});

describe.skipIf(missing !== undefined)(`gvisor: pause and resume lose nothing${why}`, { timeout: 600_000 }, () => {
  it(`${CYCLES} pause/resume cycles with a process writing a counter: every count is there, in order, and it goes on`, async () => {
    const s = await Sandbox.create("base", { timeoutMs: 1_800_000 });
    try {
      await s.commands.run("i=0; while :; do i=$((i+1)); echo $i >> /home/user/count; sleep 0.05; done", { background: true, timeoutMs: 0 });
      let last = 0;
      for (let cycle = 0; cycle < CYCLES; cycle++) {
        expect(await s.pause(), `pause ${cycle}`).toBe(true);
        const again = await Sandbox.connect(s.sandboxId);
        // The counter goes on after each resume: a count past the one seen before.
        let now = last;
        for (let tries = 0; tries < 100 && now <= last; tries++) now = Number((await sh(again, "tail -1 /home/user/count")).out.trim());
        expect(now, `cycle ${cycle}`).toBeGreaterThan(last);
        last = now;
      }
      const lines = (await s.files.read("/home/user/count")).trim().split("\n").map(Number);
      expect(lines.length).toBeGreaterThanOrEqual(last);
      const gap = lines.findIndex((n, i) => n !== i + 1);
      expect(gap, `line ${gap + 1}: ${lines.slice(Math.max(0, gap - 3), gap + 3).join(",")}`).toBe(-1);
    } finally {
      await s.kill();
    }
  });
});
