// Egress policies (E2B's network.allowOut / denyOut) on the process runtime,
// through the real JS SDK: every sandbox has its own network namespace joined
// to the host by a veth pair, and nftables on the host allows or refuses its
// connections. Destinations are two addresses of a test host in a network
// namespace of this test's own (helpers/peer-host.ts), reached through the
// host's forwarding and NAT as the internet would be, so no internet is
// needed; a domain name in allowOut is checked with a package registry where
// this machine can reach one.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SandboxEvent } from "../../control-plane/events/types.js";
import { findExecutable } from "../../control-plane/host/executables.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain } from "../helpers/egress.js";
import { startPeerHost, type PeerHost } from "../helpers/peer-host.js";
import { rejection, setEnv } from "../helpers/sdk.js";

let cp: TestControlPlane;
let restoreEnv = () => {};
let peer: PeerHost;
let port: number;
let hostAddr: string;
let otherAddr: string;
const created: Sandbox[] = [];

const runtime = new ProcessRuntime();
const missing = await runtime.egressUnsupported();

beforeAll(async () => {
  if (missing) return;
  peer = await startPeerHost();
  [hostAddr, otherAddr, port] = [peer.a, peer.b, peer.port];
  cp = await startTestControlPlane({ runtime });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
});

afterAll(async () => {
  for (const s of created) await s.kill().catch(() => undefined);
  restoreEnv();
  await cp?.close();
  await peer?.close();
});

async function create(network?: { allowOut?: string[]; denyOut?: string[] }, allowInternetAccess?: boolean): Promise<Sandbox> {
  const s = await Sandbox.create("base", { ...(network ? { network } : {}), ...(allowInternetAccess !== undefined ? { allowInternetAccess } : {}) });
  created.push(s);
  return s;
}

/** What `curl http://<addr>:<port>/` prints in the sandbox: `ok`, or `refused (exit N)`. */
async function reach(s: Sandbox, addr: string, p = port): Promise<string> {
  const r = await s.commands.run(`curl -s -m 10 http://${addr}:${p}/ || echo "refused (exit $?)"`);
  const out = r.stdout.trim();
  return out.startsWith("peer-ok") ? "host-ok" : out;
}

/** The peer's second address: a destination no policy below names unless it says so. */
async function gateway(_s: Sandbox): Promise<string> {
  return otherAddr;
}

const nftHas = (chain: string) => nftChain(chain) !== undefined;

describe.skipIf(missing !== undefined)(`egress policies on the process runtime${missing ? ` (skipped: ${missing})` : ""}`, () => {
  it("without a policy a sandbox reaches other hosts through its own network", async () => {
    const s = await create();
    expect(await reach(s, hostAddr!)).toBe("host-ok");
    expect(await reach(s, otherAddr)).toBe("host-ok");
  });

  it.skipIf(!findExecutable("conntrack"))("each connection a sandbox opens is a network.request event (protocol, destination, port); a refused one is not [needs conntrack: scripts/setup-host installs it]", async () => {
    const seen: SandboxEvent[] = [];
    const off = cp.activity.bus.on((e: SandboxEvent) => {
      if (e.event_type === "network.request") seen.push(e);
    });
    try {
      const s = await create({ denyOut: [`${otherAddr}/32`] });
      expect(await reach(s, hostAddr!)).toBe("host-ok");
      expect(await reach(s, otherAddr)).toMatch(/^refused/);
      const mine = () => seen.filter((e) => e.sandbox_id === s.sandboxId);
      for (let i = 0; i < 200 && !mine().some((e) => e.destination === hostAddr); i++) await new Promise((r) => setTimeout(r, 25));
      expect(mine().find((e) => e.destination === hostAddr)).toMatchObject({ protocol: "tcp", port });
      expect(mine().some((e) => e.destination === otherAddr)).toBe(false);
      // And through the workspace API's event log, filtered by type.
      const res = await fetch(`${cp.workspaceUrl}/events?sandbox_id=${s.sandboxId}&event_type=network.request`, { headers: { "x-api-key": cp.apiKey } });
      const logged = ((await res.json()) as { events: SandboxEvent[] }).events;
      expect(logged.some((e) => e.destination === hostAddr && e.port === port)).toBe(true);
    } finally {
      off();
    }
  });

  it("denyOut refuses exactly the listed destinations, at once (no hang)", async () => {
    const s = await create({ denyOut: [`${hostAddr}/32`] });
    const gw = await gateway(s);
    expect(await reach(s, hostAddr!)).toMatch(/^refused \(exit 7\)$/);
    // The peer's other address is not listed.
    expect(await reach(s, gw)).toBe("host-ok");
    // Its own network: eth0 on a sandbox /30 (not the host's interfaces).
    const addrs = await s.commands.run("ip -o -4 addr show");
    expect(addrs.stdout).toMatch(/eth0\s+inet 10\.201\./);
  });

  it("allowOut wins over denyOut: allow one address, deny everything else", async () => {
    const s = await create({ allowOut: [hostAddr!], denyOut: ["0.0.0.0/0"] });
    expect(await reach(s, hostAddr!)).toBe("host-ok");
    expect(await reach(s, await gateway(s))).toMatch(/^refused/);
  });

  it("allowInternetAccess: false with allowOut allows only the list", async () => {
    const s = await create({ allowOut: [`${hostAddr}/32`] }, false);
    expect(await reach(s, hostAddr!)).toBe("host-ok");
    expect(await reach(s, await gateway(s))).toMatch(/^refused/);
    // getInfo returns the policy as it was asked for.
    expect((await s.getInfo()).network).toMatchObject({ allowOut: [`${hostAddr}/32`] });
  });

  it("user ports still reach a server in a sandbox with its own network", async () => {
    const s = await create({ denyOut: ["0.0.0.0/0"] });
    await s.commands.run("python3 -m http.server 8123 --bind 127.0.0.1 --directory /tmp", { background: true, timeoutMs: 0 });
    const host = s.getHost(8123);
    let status = 0;
    for (let i = 0; i < 100 && status !== 200; i++) {
      status = (await fetch(cp.url, { headers: { "e2b-sandbox-id": s.sandboxId, "e2b-sandbox-port": "8123" } })).status;
      if (status !== 200) await new Promise((r) => setTimeout(r, 100));
    }
    expect(status, `GET through ${host}`).toBe(200);
  });

  it("updateNetwork replaces the rules of any running sandbox, with or without a policy at create", async () => {
    const s = await create({ denyOut: [hostAddr!] });
    expect(await reach(s, hostAddr!)).toMatch(/^refused/);
    await s.updateNetwork({});
    expect(await reach(s, hostAddr!)).toBe("host-ok");
    await s.updateNetwork({ allowOut: [hostAddr!], denyOut: ["0.0.0.0/0"] });
    expect(await reach(s, hostAddr!)).toBe("host-ok");
    expect(await reach(s, await gateway(s))).toMatch(/^refused/);
    expect((await s.getInfo()).network).toMatchObject({ allowOut: [hostAddr!], denyOut: ["0.0.0.0/0"] });

    // A sandbox created without a policy takes one as well (E2B allows it), and gives it back.
    const plain = await create();
    expect(await reach(plain, hostAddr!)).toBe("host-ok");
    await plain.updateNetwork({ denyOut: ["0.0.0.0/0"] });
    expect(await reach(plain, hostAddr!)).toMatch(/^refused/);
    await plain.updateNetwork({});
    expect(await reach(plain, hostAddr!)).toBe("host-ok");

    // One created offline has only `lo`: an allow list gives it a way out to exactly that.
    const offline = await create(undefined, false);
    expect(await reach(offline, hostAddr!)).toMatch(/^refused/);
    await offline.updateNetwork({ allowOut: [hostAddr!], denyOut: ["0.0.0.0/0"] });
    expect(await reach(offline, hostAddr!)).toBe("host-ok");
    expect(await reach(offline, otherAddr)).toMatch(/^refused/);
  });

  it("a killed sandbox leaves no rules and no device behind", async () => {
    const s = await create({ denyOut: ["192.0.2.123"] });
    const chain = `sbx_${s.sandboxId}`;
    const device = `l2b${s.sandboxId.slice(-12)}`;
    expect(nftHas(chain)).toBe(true);
    await s.kill();
    expect(nftHas(chain)).toBe(false);
    expect(() => execFileSync("ip", ["link", "show", device], { stdio: "ignore" })).toThrow();
  });

  it("a policy holds across a control-plane restart, and the re-adopted sandbox still cleans up", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-egress-restart-"));
    const apiKey = `e2b_${"e".repeat(40)}`;
    const start = () => startTestControlPlane({ dataDir, apiKey, runtime: new ProcessRuntime() });
    let other = await start();
    let restore = setEnv({ ...other.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
    try {
      const s = await Sandbox.create("base", { network: { denyOut: [hostAddr!] } });
      expect(await reach(s, hostAddr!)).toMatch(/^refused/);
      restore();
      await other.stopKeepingSandboxes();
      other = await start();
      restore = setEnv({ ...other.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
      const again = await Sandbox.connect(s.sandboxId);
      expect(await reach(again, hostAddr!)).toMatch(/^refused/);
      expect(nftHas(`sbx_${s.sandboxId}`)).toBe(true);
      await again.kill();
      expect(nftHas(`sbx_${s.sandboxId}`)).toBe(false);
    } finally {
      restore();
      await other.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("refuses entries it cannot enforce with a 400 that names them", async () => {
    const cases: [Record<string, string[]>, RegExp][] = [
      [{ allowOut: ["not an address!"] }, /'not an address!' is not a CIDR block, an IP address or a domain name/],
      [{ denyOut: ["10.0.0.0/33"] }, /invalid prefix length/],
      [{ denyOut: ["example.com"] }, /domain names are not supported in deny rules/],
      [{ allowOut: ["2001:db8::1"] }, /IPv6/],
    ];
    for (const [network, message] of cases) {
      const err = await rejection(create(network));
      // The JS SDK surfaces a create's 400 as a SandboxError "400: <message>".
      expect(err.message, JSON.stringify(network)).toMatch(/^400: network\./);
      expect(err.message).toMatch(message);
    }
  });
});

// A domain name in allowOut is judged by the egress proxy on each connection's SNI / Host
// (egress-domains.test.ts has the cases, on a test host). Checked here against a package
// registry, the one kind of remote host these machines can reach.
const REGISTRY = "deb.debian.org";
function registryReachable(): boolean {
  try {
    execFileSync("curl", ["-s", "-o", "/dev/null", "-m", "10", `http://${REGISTRY}/`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
const registryMissing = missing ?? (registryReachable() ? undefined : `${REGISTRY} is not reachable from this host`);

describe.skipIf(registryMissing !== undefined)(`egress policies with domain names${registryMissing ? ` (skipped: ${registryMissing})` : ""}`, () => {
  it("allowOut with a domain name lets the sandbox reach that host and nothing else; DNS keeps working", async () => {
    const s = await create({ allowOut: [REGISTRY], denyOut: ["0.0.0.0/0"] });
    const ok = await s.commands.run(`curl -s -o /dev/null -w '%{http_code}' -m 15 http://${REGISTRY}/ || echo refused`);
    expect(ok.stdout).toMatch(/^[23]\d\d$/);
    expect(await reach(s, hostAddr!)).toMatch(/^refused/);
  });
});
