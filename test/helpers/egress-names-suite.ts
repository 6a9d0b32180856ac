// The host-name egress cases every runtime on the shared nft path must pass
// (the process runtime has the full set in egress-domains.test.ts): a sandbox
// created through the JS SDK with `allowOut: [a name]` reaches that name by
// HTTPS and HTTP and nothing else, by name or by address; updateNetwork
// changes it; and `network.rules` (egress-rules.test.ts has the full set): a
// rule's header, with a secret's placeholder, set in HTTPS the client
// verified with the egress CA the sandbox was made to trust. The
// destinations: a named peer (named-peer.ts) whose DNS the server's
// sandboxes use, and whose CA the server trusts for upstreams.
import { createHash } from "node:crypto";
import { Sandbox, Secret } from "e2b";
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
    const restoreDns = setEnv({ LOCALE2B_DNS: peer.a, LOCALE2B_EGRESS_UPSTREAM_CA: peer.caFile });
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

  it("network.rules: a rule's header (a secret's current value) in HTTPS the client verified, and plain HTTP; other hosts untouched", { timeout: o.timeoutMs }, async () => {
    const sha = (v: string) => `sha256:${createHash("sha256").update(v).digest("hex")}`;
    await Secret.create("suite-key", "sk-suite-one");
    const rules = { "api.allowed.test": [{ transform: { headers: { "X-Api-Key": Secret.fill("suite-key") } } }] };
    const s = await Sandbox.create("base", { network: { rules }, timeoutMs: 600_000 });
    const run = async (cmd: string) => (await s.commands.run(`${cmd} || echo "failed (exit $?)"`, { timeoutMs: 120_000 })).stdout.trim();
    try {
      expect(await run("curl -s -m 20 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha("sk-suite-one")}`);
      expect(await run("curl -s -m 20 http://api.allowed.test:8081/h/x-api-key")).toBe(`x-api-key=${sha("sk-suite-one")}`);
      await Secret.update("suite-key", "sk-suite-two");
      const py = `python3 -c "import urllib.request; print(urllib.request.urlopen('https://api.allowed.test:8443/h/x-api-key').read().decode().strip())"`;
      expect(await run(py)).toBe(`x-api-key=${sha("sk-suite-two")}`);
      // Not intercepted: the peer's own certificate, which the sandbox does not trust (curl exit 60).
      expect(await run("curl -s -m 20 https://other.test:8443/")).toBe("failed (exit 60)");
      expect(await run("curl -sk -m 20 https://other.test:8443/h/x-api-key")).toBe("x-api-key=absent");
    } finally {
      await s.kill();
      await Secret.destroy("suite-key");
    }
  });
}
