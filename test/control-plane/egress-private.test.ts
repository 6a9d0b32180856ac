// Private networks from inside a sandbox (process runtime, through the real
// JS SDK), as `user` and as root: a test host on 10.203.0.0/16 (a private
// range, as a LAN or a VPC is) is refused whatever the sandbox's allowOut
// says, also through the egress proxy (a name pointed at it), while a test
// host on public space is reachable and DNS to the host's resolvers works;
// a resolver behind the host's DNAT (as a cluster's DNS Service is) stays
// allowed, the address it is rewritten to does not; a server started with
// LOCALE2B_SANDBOX_ALLOW_PRIVATE lets its sandboxes reach exactly the parts it
// names, and their denyOut still applies.
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain } from "../helpers/egress.js";
import { startNamedPeer, type NamedPeer } from "../helpers/named-peer.js";
import { startPeerHost, type PeerHost } from "../helpers/peer-host.js";
import { setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const missing = await runtime.egressUnsupported();
if (missing) console.warn(`egress-private.test.ts: skipping: ${missing}`);

let inside: PeerHost;
/** Public space, with a DNS server on its first address that points names at either peer. */
let outside: NamedPeer;

beforeAll(async () => {
  if (missing) return;
  inside = await startPeerHost(undefined, { range: "private" });
  outside = await startNamedPeer(["public.example.test"], (p) => ({ "mirror.internal.test": inside.a, "public.example.test": p.b }));
});

afterAll(async () => {
  await inside?.close();
  await outside?.close();
});

/** `curl` in the sandbox as `user`: the peer's answer (`peer-ok <address>`) or `refused (exit N)`. */
async function reach(s: Sandbox, url: string, user: "user" | "root" = "user", curlArgs = ""): Promise<string> {
  const r = await s.commands.run(`curl -s -m 10 ${curlArgs} ${url} || echo "refused (exit $?)"`, { user });
  return r.stdout.trim();
}

/** A server of the test's own, with the given environment until done() (LOCALE2B_DNS is read at each create). */
async function server(env: Record<string, string | undefined>): Promise<{ cp: TestControlPlane; done: () => Promise<void> }> {
  const restoreSettings = setEnv(env);
  let cp: TestControlPlane;
  try {
    cp = await startTestControlPlane({ runtime });
  } catch (err) {
    restoreSettings();
    throw err;
  }
  const restoreSdk = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  return {
    cp,
    async done() {
      restoreSdk();
      await cp.close();
      restoreSettings();
    },
  };
}

/** A server of the test's own for the enclosing describe block, with `env()` (read when it starts). */
function useServer(env: () => Record<string, string | undefined>): void {
  let s: { cp: TestControlPlane; done: () => Promise<void> } | undefined;
  beforeAll(async () => {
    s = await server(env());
  });
  afterAll(async () => {
    await s?.done();
  });
}

describe.skipIf(missing !== undefined)("private networks are out of a sandbox's reach", () => {
  useServer(() => ({ LOCALE2B_SANDBOX_ALLOW_PRIVATE: undefined }));

  it("as user and as root: a private address is refused, a public one answers, DNS to the host's resolvers works", async () => {
    const sbx = await Sandbox.create("base");
    try {
      for (const user of ["user", "root"] as const) {
        expect(await reach(sbx, `http://${inside.a}:${inside.port}/`, user)).toBe("refused (exit 7)");
        expect(await reach(sbx, `http://${outside.a}:${outside.port}/`, user)).toBe(`peer-ok ${outside.a}`);
      }
      // The host's resolver may itself be private (here it is when /etc/resolv.conf names one): DNS still works.
      const name = "registry.npmjs.org";
      if (spawnSync("getent", ["hosts", name]).status === 0) {
        expect((await sbx.commands.run(`getent hosts ${name}`)).stdout).toMatch(/^\d+\.\d+\.\d+\.\d+\s/);
      }
    } finally {
      await sbx.kill();
    }
  });

  it("allowOut naming the private address does not open it", async () => {
    const sbx = await Sandbox.create("base", { network: { allowOut: [`${inside.a}/32`, `${outside.a}/32`], denyOut: ["0.0.0.0/0"] } });
    try {
      for (const user of ["user", "root"] as const) {
        expect(await reach(sbx, `http://${inside.a}:${inside.port}/`, user)).toBe("refused (exit 7)");
        expect(await reach(sbx, `http://${outside.a}:${outside.port}/`, user)).toBe(`peer-ok ${outside.a}`);
      }
    } finally {
      await sbx.kill();
    }
  });
});

describe.skipIf(missing !== undefined)("rules removed under a running sandbox (a firewall reload)", () => {
  useServer(() => ({ LOCALE2B_SANDBOX_ALLOW_PRIVATE: undefined }));

  it("come back within seconds: its denyOut holds again; private space stays refused meanwhile", async () => {
    const sbx = await Sandbox.create("base", { network: { denyOut: [`${outside.a}/32`] } });
    try {
      const chain = `sbx_${sbx.sandboxId}`;
      expect(await reach(sbx, `http://${outside.a}:${outside.port}/`)).toBe("refused (exit 7)");
      // What a reload does to this sandbox's rules (not to the whole table here: other tests' sandboxes share it).
      execFileSync("nft", ["-f", "-"], { input: `delete element inet locale2b sandboxes { "l2b${sbx.sandboxId.slice(-12)}" }\ndelete chain inet locale2b ${chain}` });
      expect(nftChain(chain)).toBeUndefined();
      // A device without a chain is still refused private space (the table's own rule).
      expect(await reach(sbx, `http://${inside.a}:${inside.port}/`, "root")).toBe("refused (exit 7)");
      for (let i = 0; i < 100 && nftChain(chain) === undefined; i++) await new Promise((r) => setTimeout(r, 300));
      expect(nftChain(chain), "the server wrote the sandbox's chain again").toBeDefined();
      for (const user of ["user", "root"] as const) {
        expect(await reach(sbx, `http://${outside.a}:${outside.port}/`, user)).toBe("refused (exit 7)");
        expect(await reach(sbx, `http://${outside.b}:${outside.port}/`, user)).toBe(`peer-ok ${outside.b}`);
      }
    } finally {
      await sbx.kill();
    }
  });
});

describe.skipIf(missing !== undefined)("a name in allowOut that resolves to private space (the egress proxy)", () => {
  // Sandboxes and the egress proxy resolve with the peer's DNS server: mirror.internal.test is a private address.
  useServer(() => ({ LOCALE2B_SANDBOX_ALLOW_PRIVATE: undefined, LOCALE2B_DNS: outside.a }));

  it("is refused as user and as root, while an allowed name in public space answers through the same proxy", async () => {
    // TCP its addresses do not settle goes through the egress proxy, which judges the Host header and checks
    // that the name resolves to the address the sandbox dialed.
    const sbx = await Sandbox.create("base", { network: { allowOut: ["mirror.internal.test", "public.example.test"], denyOut: ["0.0.0.0/0"] } });
    try {
      expect((await sbx.commands.run("getent hosts mirror.internal.test")).stdout).toContain(inside.a);
      for (const user of ["user", "root"] as const) {
        expect(await reach(sbx, `http://mirror.internal.test:${inside.port}/`, user)).toMatch(/^refused \(exit (7|52|56)\)$/);
        expect(await reach(sbx, `http://public.example.test:${outside.port}/`, user)).toBe(`peer-ok ${outside.b}`);
      }
    } finally {
      await sbx.kill();
    }
  });
});

describe.skipIf(missing !== undefined)("a resolver behind the host's DNAT, as a Kubernetes DNS Service is", () => {
  // The sandboxes' resolver is a Service-like address (unused, private) that a host nat rule rewrites to a DNS
  // server in private space, as kube-proxy rewrites a ClusterIP to a CoreDNS pod.
  const serviceIp = "100.127.53.53";
  const table = `l2btest_dnat_${randomBytes(3).toString("hex")}`;
  let dns: NamedPeer;
  beforeAll(async () => {
    dns = await startNamedPeer(["dns.internal.test"], () => ({ "mirror.internal.test": inside.a }), { range: "private" });
    const nft = (script: string) => execFileSync("nft", ["-f", "-"], { input: script });
    nft(`add table ip ${table}
add chain ip ${table} pre { type nat hook prerouting priority dstnat; }
add rule ip ${table} pre ip daddr ${serviceIp} udp dport 53 dnat to ${dns.a}
add rule ip ${table} pre ip daddr ${serviceIp} tcp dport 53 dnat to ${dns.a}`);
  });
  afterAll(async () => {
    spawnSync("nft", ["delete", "table", "ip", table]);
    await dns?.close();
  });
  // After the DNAT and its peer are up; stopped before they go (after-hooks run last-registered first).
  useServer(() => ({ LOCALE2B_SANDBOX_ALLOW_PRIVATE: undefined, LOCALE2B_DNS: serviceIp }));

  it("names resolve through it, as user and as root; the DNS server's own address is refused", async () => {
    const sbx = await Sandbox.create("base", { network: { allowOut: [`${outside.a}/32`], denyOut: ["0.0.0.0/0"] } });
    try {
      for (const user of ["user", "root"] as const) {
        expect((await sbx.commands.run("getent hosts mirror.internal.test", { user })).stdout).toContain(inside.a);
        // Asked directly, the rewritten-to address is private space like any other.
        // EHOSTUNREACH (113): the host's reject; a reached server would accept or reset (ECONNREFUSED, 111).
        const direct = await sbx.commands.run(`python3 -c "
import socket
s = socket.socket(); s.settimeout(5)
try:
    s.connect(('${dns.a}', 53)); print('REACHED')
except OSError as e:
    print('refused', e.errno)"`, { user });
        expect(direct.stdout.trim()).toBe("refused 113");
      }
    } finally {
      await sbx.kill();
    }
  });
});

describe.skipIf(missing !== undefined)("LOCALE2B_SANDBOX_ALLOW_PRIVATE opens parts of private space to a server's sandboxes", () => {
  useServer(() => ({ LOCALE2B_SANDBOX_ALLOW_PRIVATE: `${inside.a}/32, ${inside.c}` }));

  it("the opened addresses answer, the rest of the range does not; a sandbox's denyOut still refuses them", async () => {
    const sbx = await Sandbox.create("base");
    try {
      for (const user of ["user", "root"] as const) {
        expect(await reach(sbx, `http://${inside.a}:${inside.port}/`, user)).toBe(`peer-ok ${inside.a}`);
        expect(await reach(sbx, `http://${inside.c}:${inside.port}/`, user)).toBe(`peer-ok ${inside.c}`);
        expect(await reach(sbx, `http://${inside.b}:${inside.port}/`, user)).toBe("refused (exit 7)");
      }
      await sbx.updateNetwork({ denyOut: [`${inside.a}/32`] });
      expect(await reach(sbx, `http://${inside.a}:${inside.port}/`, "root")).toBe("refused (exit 7)");
      expect(await reach(sbx, `http://${inside.c}:${inside.port}/`, "root")).toBe(`peer-ok ${inside.c}`);
    } finally {
      await sbx.kill();
    }
  });

  it("a malformed list stops the start with a message naming the variable", async () => {
    await expect(server({ LOCALE2B_SANDBOX_ALLOW_PRIVATE: "10.0.0.0/8, intranet" })).rejects.toThrow(
      /LOCALE2B_SANDBOX_ALLOW_PRIVATE: 'intranet' is not an IPv4 address or CIDR/,
    );
  });
});
