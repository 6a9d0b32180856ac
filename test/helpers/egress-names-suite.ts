// The host-name egress cases every runtime on the shared nft path must pass
// (the process runtime has the full set in egress-domains.test.ts): a sandbox
// created through the JS SDK with `allowOut: [a name]` reaches that name by
// HTTPS and HTTP and nothing else, by name or by address; updateNetwork
// changes it. The destinations: a named peer (named-peer.ts) whose DNS the
// server's sandboxes use.
import { Sandbox } from "e2b";
import { afterAll, beforeAll, expect, it } from "vitest";
import type { Runtime } from "../../control-plane/runtimes/runtime.js";
import { startTestControlPlane, type TestControlPlane } from "./control-plane.js";
import { nftChain } from "./egress.js";
import { startNamedPeer, type NamedPeer } from "./named-peer.js";
import { setEnv } from "./sdk.js";

export function egressNamesSuite(o: { runtime: () => Runtime; imagesDir?: string; timeoutMs: number }): void {
  let cp: TestControlPlane;
  let peer: NamedPeer;
  let restore = () => {};

  beforeAll(async () => {
    peer = await startNamedPeer(["api.allowed.test", "other.test"], (p) => ({ "api.allowed.test": p.b, "other.test": p.c }));
    const restoreDns = setEnv({ LOCALE2B_DNS: peer.a });
    cp = await startTestControlPlane({ runtime: o.runtime(), ...(o.imagesDir ? { imagesDir: o.imagesDir } : {}) });
    const restoreSdk = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    restore = () => (restoreSdk(), restoreDns());
  }, o.timeoutMs);

  afterAll(async () => {
    await cp?.close();
    restore();
    await peer?.close();
  }, o.timeoutMs);

  it("allowOut by name: HTTPS (SNI) and HTTP (Host) to the name pass, other names and bare addresses do not; updateNetwork changes it", { timeout: o.timeoutMs }, async () => {
    const s = await Sandbox.create("base", { network: { allowOut: ["api.allowed.test"], denyOut: ["0.0.0.0/0"] }, timeoutMs: 600_000 });
    const curl = async (args: string) => (await s.commands.run(`curl -sk -m 20 ${args} || echo "refused (exit $?)"`, { timeoutMs: 120_000 })).stdout.trim();
    try {
      expect(await curl("https://api.allowed.test:8443/")).toBe(`tls-ok ${peer.b} sni=api.allowed.test host=api.allowed.test:8443`);
      expect(await curl("http://api.allowed.test:8081/")).toBe(`http-ok ${peer.b} host=api.allowed.test:8081`);
      expect(await curl("https://other.test:8443/")).toMatch(/^refused/);
      expect(await curl(`https://${peer.b}:8443/`)).toMatch(/^refused/);
      expect(await curl(`--resolve api.allowed.test:8443:${peer.c} https://api.allowed.test:8443/`)).toMatch(/^refused/);
      expect(nftChain(`px_${s.sandboxId}`)).toBeDefined();
      await s.updateNetwork({ allowOut: ["other.test"], denyOut: ["0.0.0.0/0"] });
      expect(await curl("https://other.test:8443/")).toMatch(/^tls-ok/);
      expect(await curl("https://api.allowed.test:8443/")).toMatch(/^refused/);
    } finally {
      await s.kill();
    }
    expect(nftChain(`px_${s.sandboxId}`)).toBeUndefined();
  });
}
