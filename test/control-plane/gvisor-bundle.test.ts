// The gvisor runtime's pure parts, no runsc needed: the OCI spec a sandbox
// runs with, its directory layout, the rules a veth gets, the network
// namespace's name.
import { describe, expect, it } from "vitest";
import { HOST_DIR, ociSpec } from "../../control-plane/runtimes/gvisor/bundle.js";
import { effectivePolicy } from "../../control-plane/runtimes/gvisor/instance.js";
import { gvisorLayout } from "../../control-plane/runtimes/gvisor/rootfs.js";
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

  it("limits memory, CPU and pids in the cgroup runsc makes; /dev/shm is half the memory", () => {
    const spec = ociSpec(base) as { linux: { cgroupsPath: string; resources: Record<string, Record<string, number>> }; mounts: { destination: string; options?: string[] }[] };
    expect(spec.linux.cgroupsPath).toBe(base.cgroupsPath);
    expect(spec.linux.resources).toEqual({ memory: { limit: 512 << 20 }, cpu: { quota: 200_000, period: 100_000 }, pids: { limit: 1024 } });
    expect(spec.mounts.find((m) => m.destination === "/dev/shm")?.options).toContain(`size=${256 << 20}`);
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
