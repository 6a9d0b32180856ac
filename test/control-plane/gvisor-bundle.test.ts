// The gvisor runtime's pure parts, no runsc needed: the OCI spec a sandbox
// runs with, its directory layout, the rules a veth gets, the network
// namespace's name.
import { describe, expect, it } from "vitest";
import { HOST_DIR, hostPidsMax, ociSpec } from "../../control-plane/runtimes/gvisor/bundle.js";
import { effectivePolicy } from "../../control-plane/runtimes/gvisor/instance.js";
import { isRunscProcess, keptExecutableOf } from "../../control-plane/runtimes/gvisor/oom-ranks.js";
import { oldRunscNote, runscDateOf } from "../../control-plane/runtimes/gvisor/runsc.js";
import { gvisorLayout } from "../../control-plane/runtimes/gvisor/rootfs.js";
import { bundleVolumes } from "../../control-plane/runtimes/gvisor/volume-binds.js";
import { netnsName } from "../../control-plane/runtimes/net/netns.js";

const base = {
  sandboxId: "abc123def456ghi7",
  rootfs: "/data/sandboxes/abc/bundle/rootfs",
  hostDir: "/data/sandboxes/abc/host",
  memoryMB: 512,
  cpuCount: 2,
  pidsMax: 1024,
  envdLogLevel: "info",
  cgroupsPath: "locale2b-gvisor/abc123def456ghi7",
};

describe("gvisor OCI spec", () => {
  it("runs locale2b-init as PID 1 on the hybrid-vsock socket in the bind-mounted host dir, as root with Docker's capabilities", () => {
    const spec = ociSpec(base) as { process: { args: string[]; user: { uid: number }; capabilities: { bounding: string[] } }; mounts: { destination: string; source: string; type: string }[]; hostname: string };
    expect(spec.process.args.slice(0, 4)).toEqual(["/sbin/locale2b-init", "--hybrid-listen", `${HOST_DIR}/envd.sock`, "--forward-ports"]);
    expect(spec.process.user.uid).toBe(0);
    expect(spec.process.capabilities.bounding).toContain("CAP_SETUID");
    expect(spec.process.capabilities.bounding).not.toContain("CAP_SYS_ADMIN");
    expect(spec.mounts.find((m) => m.destination === HOST_DIR)).toMatchObject({ type: "bind", source: base.hostDir });
    expect(spec.hostname).toBe(base.sandboxId);
  });

  it("limits memory, CPU and pids in the cgroup runsc makes; /dev/shm is half the memory, /run bounded; gVisor's own cgroups are mounted", () => {
    const spec = ociSpec(base) as { linux: { cgroupsPath: string; resources: Record<string, Record<string, number>> }; mounts: { destination: string; type: string; options?: string[] }[] };
    expect(spec.linux.cgroupsPath).toBe(base.cgroupsPath);
    // The host's pids limit leaves room for a systrap stub per task inside: the limit inside (1024) stops a bomb first.
    expect(spec.linux.resources).toEqual({ memory: { limit: 512 << 20 }, cpu: { quota: 200_000, period: 100_000 }, pids: { limit: hostPidsMax(1024) } });
    expect(hostPidsMax(1024)).toBeGreaterThan(2 * 1024);
    expect(spec.mounts.find((m) => m.destination === "/dev/shm")?.options).toContain(`size=${256 << 20}`);
    expect(spec.mounts.find((m) => m.destination === "/run")?.options).toContain(`size=${64 << 20}`);
    expect(spec.mounts.find((m) => m.destination === "/sys/fs/cgroup")?.type).toBe("cgroup");
  });

  it("binds each volume's id-mapped source (under the sandbox's dir) at its path, nodev and nosuid", () => {
    const volumes = bundleVolumes("/data/sandboxes/abc", [
      { hostPath: "/data/volumes/vol_a/files", path: "/mnt/a" },
      { hostPath: "/data/volumes/vol_b/files", path: "/srv/b" },
    ]);
    expect(volumes).toEqual([
      { source: "/data/sandboxes/abc/volumes/0", destination: "/mnt/a" },
      { source: "/data/sandboxes/abc/volumes/1", destination: "/srv/b" },
    ]);
    const spec = ociSpec({ ...base, volumes }) as { mounts: { destination: string; source: string; type: string; options?: string[] }[] };
    expect(spec.mounts.slice(-2)).toEqual([
      { destination: "/mnt/a", type: "bind", source: "/data/sandboxes/abc/volumes/0", options: ["bind", "rw", "nodev", "nosuid"] },
      { destination: "/srv/b", type: "bind", source: "/data/sandboxes/abc/volumes/1", options: ["bind", "rw", "nodev", "nosuid"] },
    ]);
    expect((ociSpec(base) as { mounts: unknown[] }).mounts).toHaveLength(spec.mounts.length - 2);
  });

  it("joins the named network namespace when it has one, else gets a new one (loopback only)", () => {
    const withNet = ociSpec({ ...base, netnsPath: "/run/netns/l2bnx" }) as { linux: { namespaces: { type: string; path?: string }[] } };
    expect(withNet.linux.namespaces.find((n) => n.type === "network")).toEqual({ type: "network", path: "/run/netns/l2bnx" });
    const none = ociSpec(base) as { linux: { namespaces: { type: string; path?: string }[] } };
    expect(none.linux.namespaces.find((n) => n.type === "network")).toEqual({ type: "network" });
  });
});

describe("gvisor sandbox directory and network", () => {
  it("keeps everything of a sandbox under its own directory", () => {
    const l = gvisorLayout("/d/s1");
    for (const p of [l.config, l.rootfs, l.disk, l.diskMount, l.socket, l.runscRoot, l.log]) expect(p.startsWith("/d/s1/")).toBe(true);
    expect(l.socket).toBe("/d/s1/host/envd.sock");
    expect(l.dialSocket).toBe("/d/s1/envd.sock"); // out of the sandbox's reach
  });

  it("a veth's rules: the policy, else everything with internet access, else nothing", () => {
    expect(effectivePolicy(undefined, true)).toEqual({ allow: [], deny: [] });
    expect(effectivePolicy(undefined, false)).toEqual({ allow: [], deny: ["0.0.0.0/0"] });
    const p = { allow: ["1.2.3.4/32"], deny: ["0.0.0.0/0"] };
    expect(effectivePolicy(p, true)).toBe(p);
  });

  it("names the network namespace after the sandbox (l2bn + the last 12 characters of its id)", () => {
    expect(netnsName("abcdefghijklmnopqrst")).toBe("l2bnijklmnopqrst");
  });
});

describe("gvisor OOM ranks", () => {
  it("tells runsc's own processes (sentry, gofer) from the stubs of the sandbox's processes", () => {
    expect(isRunscProcess("runsc-sandbox\0--root=/x\0boot\0")).toBe(true);
    expect(isRunscProcess("runsc-gofer\0--root=/x\0gofer\0")).toBe(true);
    expect(isRunscProcess("")).toBe(false); // a systrap stub has no command line
    expect(isRunscProcess("python3\0-c\0")).toBe(false);
  });

  it("keeps the stubs that map the init's or envd's executable (later the init's only: the spawn helper), and no other", () => {
    const map = (path: string) => `5626c018e000-5626c0192000 r-xs 00002000 fe:00 11650172                   ${path}\n`;
    expect(keptExecutableOf(map("/root/sbin/locale2b-init"))).toBe("/sbin/locale2b-init");
    expect(keptExecutableOf(`${map("/memfd:runsc-memory (deleted)")}${map("/opt/locale2b/node/bin/node")}`)).toBe("/opt/locale2b/node/bin/node");
    expect(keptExecutableOf(map("/root/usr/bin/python3.11"))).toBeUndefined();
    expect(keptExecutableOf(map("/root/usr/local/bin/node"))).toBeUndefined(); // the user's node is not envd's
    // Once envd is found, only the init's executable keeps a stub (envd's spawn helper, started later).
    expect(keptExecutableOf(map("/root/sbin/locale2b-init"), ["/sbin/locale2b-init"])).toBe("/sbin/locale2b-init");
    expect(keptExecutableOf(map("/opt/locale2b/node/bin/node"), ["/sbin/locale2b-init"])).toBeUndefined();
  });
});

describe("runsc versions", () => {
  it("reads the date of Debian's, gVisor's and our own builds' versions, and says what an older one costs", () => {
    expect(runscDateOf("0.0~20240729.0")).toBe(20240729);
    expect(runscDateOf("release-20250101.0")).toBe(20250101);
    expect(runscDateOf("0.0~20260905.0-go")).toBe(20260905);
    expect(runscDateOf("VERSION_MISSING")).toBe(0);
    expect(oldRunscNote("0.0~20240729.0")).toMatch(/burst .* can end the whole sandbox.*setup-host/);
    expect(oldRunscNote("VERSION_MISSING")).toMatch(/predates/);
    expect(oldRunscNote("0.0~20260905.0-go")).toBeUndefined();
    expect(oldRunscNote("release-20261101.0")).toBeUndefined();
  });
});
