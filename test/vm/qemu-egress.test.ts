// An egress policy (network.allowOut / denyOut) on a real QEMU microVM: the VM
// gets a tap device on a sandbox /30 instead of QEMU's user-mode NAT, and nft
// rules on that tap allow or refuse its connections. The destinations are two
// addresses of a test host in a network namespace of this test's own
// (helpers/peer-host.ts), so no internet is needed; the host itself is out of
// the VM's reach, as it is of every sandbox's.
import { execFileSync } from "node:child_process";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { tapUnsupported } from "../../control-plane/runtimes/qemu/tap.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain } from "../helpers/egress.js";
import { startPeerHost, type PeerHost } from "../helpers/peer-host.js";
import { setEnv } from "../helpers/sdk.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

const missing = qemuMissing() ?? tapUnsupported();
const why = missing ? ` [skipped: ${missing}]` : "";

let cp: TestControlPlane;
let restore = () => {};
let peer: PeerHost;
/** A peer on private space (10.203.0.0/16): no sandbox reaches it, whatever its allowOut. */
let privatePeer: PeerHost;

beforeAll(async () => {
  if (missing) return;
  peer = await startPeerHost();
  privatePeer = await startPeerHost(undefined, { range: "private" });
  cp = await startTestControlPlane({ runtime: new QemuRuntime({ imagesDir: testImagesDir() }), imagesDir: testImagesDir() });
  restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
});

afterAll(async () => {
  restore();
  await cp?.close();
  await peer?.close();
  await privatePeer?.close();
});

const nftHas = (chain: string) => nftChain(chain) !== undefined;

describe.skipIf(missing !== undefined)(`egress policy on a qemu microVM${why}`, () => {
  it("denyOut refuses the listed address at once, the rest is reachable; updateNetwork lifts it; kill removes the rules", { timeout: 300_000 }, async () => {
    const s = await Sandbox.create("base", { network: { denyOut: [`${peer.a}/32`] }, timeoutMs: 600_000 });
    try {
      const reach = async (addr: string, user: "user" | "root" = "user") => {
        const out = (await s.commands.run(`curl -s -m 20 http://${addr}:${peer.port}/ || echo "refused (exit $?)"`, { timeoutMs: 60_000, user })).stdout.trim();
        return out.startsWith("peer-ok") ? "host-ok" : out;
      };
      const route = await s.commands.run("ip route show default");
      const gw = /default via (\S+)/.exec(route.stdout)?.[1];
      expect(gw, route.stdout).toMatch(/^10\.201\./);
      expect(await reach(peer.a)).toBe("refused (exit 7)");
      expect(await reach(peer.b)).toBe("host-ok");
      // The host itself (its end of the tap) is never reachable, nor private space (a LAN, a VPC), as user or root.
      expect(await reach(gw!)).toMatch(/^refused/);
      for (const user of ["user", "root"] as const) expect(await reach(privatePeer.a, user)).toBe("refused (exit 7)");
      await s.updateNetwork({});
      expect(await reach(peer.a)).toBe("host-ok");
      expect(nftHas(`sbx_${s.sandboxId}`)).toBe(true);
    } finally {
      await s.kill();
    }
    expect(nftHas(`sbx_${s.sandboxId}`)).toBe(false);
    expect(() => execFileSync("ip", ["link", "show", `l2b${s.sandboxId.slice(-12)}`], { stdio: "ignore" })).toThrow();
  });
});
