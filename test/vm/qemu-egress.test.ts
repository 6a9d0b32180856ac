// An egress policy (network.allowOut / denyOut) on a real QEMU microVM: the VM
// gets a tap device on a sandbox /30 instead of QEMU's user-mode NAT, and nft
// rules on that tap allow or refuse its connections. The destinations are a
// server of this test on the host's own addresses (its uplink address, and
// the VM's gateway, which is the host too), so no internet is needed.
import { execFileSync } from "node:child_process";
import http from "node:http";
import type net from "node:net";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { tapUnsupported } from "../../control-plane/runtimes/qemu/tap.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain, uplinkAddress } from "../helpers/egress.js";
import { setEnv } from "../helpers/sdk.js";
import { qemuMissing, testImagesDir } from "../helpers/vm.js";

const hostAddr = uplinkAddress();
const missing = qemuMissing() ?? tapUnsupported() ?? (hostAddr ? undefined : "the host has no non-loopback IPv4 address");
const why = missing ? ` [skipped: ${missing}]` : "";

let cp: TestControlPlane;
let restore = () => {};
let server: http.Server;
let port: number;

beforeAll(async () => {
  if (missing) return;
  server = http.createServer((_req, res) => res.end("host-ok"));
  await new Promise<void>((resolve) => server.listen(0, "0.0.0.0", resolve));
  port = (server.address() as net.AddressInfo).port;
  cp = await startTestControlPlane({ runtime: new QemuRuntime({ imagesDir: testImagesDir() }), imagesDir: testImagesDir() });
  restore = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
});

afterAll(async () => {
  restore();
  await cp?.close();
  server?.close();
});

const nftHas = (chain: string) => nftChain(chain) !== undefined;

describe.skipIf(missing !== undefined)(`egress policy on a qemu microVM${why}`, () => {
  it("denyOut refuses the listed address at once, the rest is reachable; updateNetwork lifts it; kill removes the rules", { timeout: 300_000 }, async () => {
    const s = await Sandbox.create("base", { network: { denyOut: [`${hostAddr}/32`] }, timeoutMs: 600_000 });
    try {
      const reach = async (addr: string) =>
        (await s.commands.run(`curl -s -m 20 http://${addr}:${port}/ || echo "refused (exit $?)"`, { timeoutMs: 60_000 })).stdout.trim();
      const route = await s.commands.run("ip route show default");
      const gw = /default via (\S+)/.exec(route.stdout)?.[1];
      expect(gw, route.stdout).toMatch(/^10\.201\./);
      expect(await reach(hostAddr!)).toBe("refused (exit 7)");
      expect(await reach(gw!)).toBe("host-ok");
      await s.updateNetwork({});
      expect(await reach(hostAddr!)).toBe("host-ok");
      expect(nftHas(`sbx_${s.sandboxId}`)).toBe(true);
    } finally {
      await s.kill();
    }
    expect(nftHas(`sbx_${s.sandboxId}`)).toBe(false);
    expect(() => execFileSync("ip", ["link", "show", `l2b${s.sandboxId.slice(-12)}`], { stdio: "ignore" })).toThrow();
  });
});
