// Egress rules by host name (allowOut: `api.example.com`, `*.example.com`) on
// the process runtime, through the real JS SDK: a sandbox whose policy names
// hosts has its outbound TCP redirected by nft to its own egress proxy on the
// host, which reads the TLS SNI / HTTP Host and lets the connection through
// to where it was going, or resets it. The destinations are a peer host in a
// network namespace of this test's own (helpers/peer-host.ts) with three
// addresses, serving HTTPS, HTTP and DNS (helpers/named-servers.cjs); the
// sandboxes and the proxy resolve names with that DNS server (LOCALE2B_DNS).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import type { SandboxEvent } from "../../control-plane/events/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { originalDestinationUnsupported } from "../../control-plane/runtimes/net/egress-proxy/original-destination.js";
import { setProxyInfrastructure } from "../../control-plane/runtimes/net/egress-proxy/sandbox-proxy.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain, uplinkAddress } from "../helpers/egress.js";
import { getInsecure, startNamedPeer, type NamedPeer } from "../helpers/named-peer.js";
import { rejection, setEnv, waitFor } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const missing = (await runtime.egressUnsupported()) ?? (await originalDestinationUnsupported());

let cp: TestControlPlane;
let peer: NamedPeer;
let restoreEnv = () => {};
let hostService: http.Server | undefined;
const created: Sandbox[] = [];

beforeAll(async () => {
  if (missing) return;
  peer = await startNamedPeer(["allowed.test", "*.allowed.test", "*.sub.allowed.test", "other.test", "localhost"], (p) => ({
    "allowed.test": p.b,
    "api.allowed.test": p.b,
    "deep.sub.allowed.test": p.b,
    "moving.allowed.test": p.b,
    "other.test": p.c,
  }));
  const restoreDns = setEnv({ LOCALE2B_DNS: peer.a });
  cp = await startTestControlPlane({ runtime });
  const restoreSdk = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  restoreEnv = () => {
    restoreSdk();
    restoreDns();
  };
});

afterAll(async () => {
  for (const s of created) await s.kill().catch(() => undefined);
  // Every killed sandbox's redirect went with it (also those whose server in this process was not the last to stop).
  const left = created.filter((s) => nftChain(`px_${s.sandboxId}`) !== undefined).map((s) => s.sandboxId);
  await cp?.close();
  restoreEnv();
  await peer?.close();
  hostService?.close();
  if (left.length) throw new Error(`egress proxy rules left behind for ${left.join(", ")}`);
});

async function create(network: { allowOut?: string[]; denyOut?: string[] }): Promise<Sandbox> {
  const s = await Sandbox.create("base", { network });
  created.push(s);
  return s;
}

/** `curl` in the sandbox: its body, or `refused (exit N)`. */
async function curl(s: Sandbox, args: string, user: "user" | "root" = "user"): Promise<string> {
  const r = await s.commands.run(`curl -sk -m 10 ${args} || echo "refused (exit $?)"`, { user });
  return r.stdout.trim();
}

const only = ["0.0.0.0/0"];

describe.skipIf(missing !== undefined)(`egress by host name on the process runtime${missing ? ` (skipped: ${missing})` : ""}`, () => {
  it("allowOut with a name lets HTTPS (SNI) and HTTP (Host) to that name through, and nothing else", async () => {
    const seen: SandboxEvent[] = [];
    const off = cp.activity.bus.on((e: SandboxEvent) => void (e.event_type === "network.request" && seen.push(e)));
    const s = await create({ allowOut: ["api.allowed.test"], denyOut: only });
    expect(await curl(s, "https://api.allowed.test:8443/")).toBe(`tls-ok ${peer.b} sni=api.allowed.test host=api.allowed.test:8443`);
    expect(await curl(s, "http://api.allowed.test:8081/")).toBe(`http-ok ${peer.b} host=api.allowed.test:8081`);
    // Another name, on another address: refused at once (a reset, not a timeout).
    expect(await curl(s, "https://other.test:8443/")).toMatch(/^refused \(exit (35|56)\)$/);
    expect(await curl(s, "http://other.test:8081/")).toMatch(/^refused \(exit (52|56)\)$/);
    // The allowed name's own address without the name (no SNI for an IP literal): the address is not allowed.
    expect(await curl(s, `https://${peer.b}:8443/`)).toMatch(/^refused/);
    // The policy reads back as it was given.
    expect((await s.getInfo()).network).toMatchObject({ allowOut: ["api.allowed.test"], denyOut: only });
    // network.request events: the connections the proxy let out, to where they went; none for the refused ones.
    off();
    const mine = seen.filter((e) => e.sandbox_id === s.sandboxId && e.protocol === "tcp"); // (DNS is UDP, not proxied)
    expect(mine.filter((e) => e.destination === peer.b).map((e) => e.port).sort()).toEqual([8081, 8443]);
    expect(mine.filter((e) => e.destination !== peer.b), JSON.stringify(mine)).toEqual([]);
  });

  it("a wildcard allows subdomains at any depth, not the apex", async () => {
    const s = await create({ allowOut: ["*.allowed.test"], denyOut: only });
    expect(await curl(s, "https://api.allowed.test:8443/")).toMatch(/^tls-ok .* sni=api\.allowed\.test/);
    expect(await curl(s, "https://deep.sub.allowed.test:8443/")).toMatch(/^tls-ok .* sni=deep\.sub\.allowed\.test/);
    expect(await curl(s, "https://allowed.test:8443/")).toMatch(/^refused/);
    expect(await curl(s, "https://other.test:8443/")).toMatch(/^refused/);
  });

  it("address rules work alongside names: an allowed address is reached whatever it is called", async () => {
    const s = await create({ allowOut: ["api.allowed.test", `${peer.c}/32`], denyOut: only });
    expect(await curl(s, "https://other.test:8443/")).toBe(`tls-ok ${peer.c} sni=other.test host=other.test:8443`);
    expect(await curl(s, `http://${peer.c}:8080/`)).toBe(`peer-ok ${peer.c}`);
    expect(await curl(s, "https://api.allowed.test:8443/")).toMatch(/^tls-ok/);
    expect(await curl(s, `http://${peer.b}:8080/`)).toMatch(/^refused/);
    // Only what the address rules refuse goes to the proxy: a name can only let such a connection through.
    const partial = await create({ allowOut: ["api.allowed.test"], denyOut: [`${peer.c}/32`] });
    expect(nftChain(`px_${partial.sandboxId}`)).toMatch(new RegExp(`ip daddr ${peer.c.replace(/\./g, "\\.")} meta l4proto tcp dnat ip to`));
    expect(await curl(partial, `http://${peer.b}:8080/`)).toBe(`peer-ok ${peer.b}`);
    expect(await curl(partial, "https://other.test:8443/")).toMatch(/^refused/);
    expect(await curl(partial, `--resolve api.allowed.test:8443:${peer.c} https://api.allowed.test:8443/`)).toMatch(/^refused/);
    // Without a deny list names add nothing: everything is open, and no proxy is in the way.
    const open = await create({ allowOut: ["api.allowed.test"] });
    expect(await curl(open, "https://other.test:8443/")).toMatch(/^tls-ok/);
    expect(nftChain(`px_${open.sandboxId}`)).toBeUndefined();
  });

  it("a name whose address changed after create is still followed", async () => {
    const s = await create({ allowOut: ["moving.allowed.test"], denyOut: only });
    expect(await curl(s, "https://moving.allowed.test:8443/")).toMatch(new RegExp(`^tls-ok ${peer.b.replace(/\./g, "\\.")} `));
    peer.setRecords({ ...peer.records, "moving.allowed.test": peer.c });
    // The sandbox's resolver and the proxy's see the new answer (TTL 1 s): wait until the sandbox resolves it.
    await waitFor(async () => (await s.commands.run("getent hosts moving.allowed.test || true")).stdout.includes(peer.c), "the new DNS answer in the sandbox");
    expect(await curl(s, "https://moving.allowed.test:8443/")).toMatch(new RegExp(`^tls-ok ${peer.c.replace(/\./g, "\\.")} `));
  });

  it("a name that does not lead where the connection goes, or no name, is judged by the address alone", async () => {
    const s = await create({ allowOut: ["api.allowed.test"], denyOut: only });
    // SNI says an allowed name, the connection goes to another address.
    expect(await curl(s, `--resolve api.allowed.test:8443:${peer.c} https://api.allowed.test:8443/`)).toMatch(/^refused/);
    // Host says an allowed name, the connection goes to another address.
    expect(await curl(s, `-H 'Host: api.allowed.test' http://${peer.c}:8081/`)).toMatch(/^refused/);
    // No SNI at all (an IP literal), to an address not allowed.
    expect(await curl(s, `https://${peer.c}:8443/`)).toMatch(/^refused/);
    // A protocol that names nothing (raw bytes).
    const raw = await s.commands.run(`exec 3<>/dev/tcp/${peer.c}/8081 && printf 'hello\\r\\n\\r\\n' >&3 && timeout 10 cat <&3; echo "exit $?"`);
    expect(raw.stdout).not.toMatch(/http-ok|400 Bad Request/);
    // And the same requests with the allowed name going where it resolves to do pass.
    expect(await curl(s, `--resolve api.allowed.test:8443:${peer.b} https://api.allowed.test:8443/`)).toMatch(/^tls-ok/);
  });

  it("updateNetwork changes the rules for new connections; a connection already open goes on", async () => {
    const s = await create({ allowOut: ["api.allowed.test"], denyOut: only });
    await s.commands.run("curl -sk -N -m 60 https://api.allowed.test:8443/hold > /tmp/hold.out 2>&1", { background: true, timeoutMs: 0 });
    await waitFor(async () => (await s.commands.run("cat /tmp/hold.out 2>/dev/null || true")).stdout.includes("start"), "the held connection to answer");
    // Names out: only the address list (nothing) is allowed now.
    await s.updateNetwork({ allowOut: [], denyOut: only });
    expect(await curl(s, "https://api.allowed.test:8443/")).toMatch(/^refused/);
    // The open connection still carries bytes: release it from this host.
    const released = await getInsecure(`https://${peer.b}:8443/release`);
    expect(released).toBe("released\n");
    await waitFor(async () => (await s.commands.run("cat /tmp/hold.out 2>/dev/null || true")).stdout.includes("end"), "the held connection's last bytes");
    expect((await s.commands.run("cat /tmp/hold.out")).stdout).toBe("start\nend\n");
    // Names back in.
    await s.updateNetwork({ allowOut: ["*.allowed.test"], denyOut: only });
    expect(await curl(s, "https://api.allowed.test:8443/")).toMatch(/^tls-ok/);
    expect(await curl(s, "https://other.test:8443/")).toMatch(/^refused/);
    // A sandbox created without names takes them too.
    const plain = await create({ denyOut: only });
    expect(await curl(plain, "https://api.allowed.test:8443/")).toMatch(/^refused/);
    await plain.updateNetwork({ allowOut: ["api.allowed.test"], denyOut: only });
    expect(await curl(plain, "https://api.allowed.test:8443/")).toMatch(/^tls-ok/);
  });

  it("escape: as user and as root, the proxy is reached only as the redirect of the sandbox's own traffic, and never leads to the host", async () => {
    const uplink = uplinkAddress();
    hostService = http.createServer((_req, res) => res.end("host-service\n"));
    await new Promise<void>((r) => hostService!.listen(0, "0.0.0.0", r));
    const hostPort = (hostService.address() as { port: number }).port;
    const s = await create({ allowOut: ["api.allowed.test", "localhost", "*.allowed.test"], denyOut: only });
    const other = await create({ allowOut: ["api.allowed.test"], denyOut: only });
    const listener = (id: string) => /dnat ip to ([\d.]+:\d+)/.exec(nftChain(`px_${id}`) ?? "")?.[1];
    const own = listener(s.sandboxId);
    const theirs = listener(other.sandboxId);
    expect(own).toBeDefined();
    expect(theirs).toBeDefined();
    for (const user of ["user", "root"] as const) {
      // Its own listener and another sandbox's, dialled directly.
      expect(await curl(s, `http://${own}/`, user), user).toMatch(/^refused/);
      expect(await curl(s, `http://${theirs}/`, user), user).toMatch(/^refused/);
      expect(await curl(s, `--resolve api.allowed.test:8443:${own!.split(":")[0]} https://api.allowed.test:8443/`, user), user).toMatch(/^refused/);
      // The host itself, by an allowed name: SNI / Host 'localhost', or an allowed name pointed at the host.
      if (uplink) {
        expect(await curl(s, `--resolve localhost:${hostPort}:${uplink} http://localhost:${hostPort}/`, user), user).toMatch(/^refused/);
        expect(await curl(s, `--resolve api.allowed.test:${hostPort}:${uplink} http://api.allowed.test:${hostPort}/`, user), user).toMatch(/^refused/);
      }
      // 'localhost' named to the peer: the name does not lead there (the sandboxes' DNS does not answer it), refused;
      // and the proxy never dials the name, only where the connection was going.
      expect(await curl(s, `--resolve localhost:8443:${peer.b} https://localhost:8443/`, user), user).toMatch(/^refused/);
      expect(await curl(s, `-H 'Host: 127.0.0.1:${hostPort}' http://api.allowed.test:8081/`, user), user).toMatch(/^refused/);
      // Root cannot change the rules from inside.
      if (user === "root") expect((await s.commands.run("nft flush ruleset 2>&1; iptables -t nat -F 2>&1; echo done", { user })).stdout).toMatch(/done/);
    }
    expect(await curl(s, "https://other.test:8443/")).toMatch(/^refused/);
    expect(await curl(s, "https://api.allowed.test:8443/")).toMatch(/^tls-ok/);
  });

  it("escape: the proxy itself refuses the server's infrastructure, even where nft would let a redirect through", async () => {
    const s = await create({ allowOut: ["other.test"], denyOut: only });
    expect(await curl(s, "https://other.test:8443/")).toMatch(/^tls-ok/);
    // Only the proxy's own list (this server is in this process); the host's shared nft set is left alone.
    setProxyInfrastructure([`${peer.c}/32`]);
    try {
      expect(await curl(s, "https://other.test:8443/")).toMatch(/^refused/);
      expect(await curl(s, "https://other.test:8443/", "root")).toMatch(/^refused/);
    } finally {
      setProxyInfrastructure([]);
    }
    expect(await curl(s, "https://other.test:8443/")).toMatch(/^tls-ok/);
  });

  it("a killed sandbox leaves no proxy rules and no listener behind", async () => {
    const s = await create({ allowOut: ["api.allowed.test"], denyOut: only });
    const chain = nftChain(`px_${s.sandboxId}`);
    const target = /dnat ip to ([\d.]+):(\d+)/.exec(chain ?? "");
    expect(target).not.toBeNull();
    expect(execFileSync("ss", ["-Hltn", "src", `${target![1]}:${target![2]}`], { encoding: "utf8" })).toMatch(/LISTEN/);
    await s.kill();
    expect(nftChain(`px_${s.sandboxId}`)).toBeUndefined();
    const listening = (addr: string) => execFileSync("ss", ["-Hltn", "src", addr], { encoding: "utf8" }).trim();
    expect(listening(`${target![1]}:${target![2]}`)).toBe("");
  });

  it("names keep being enforced across a control-plane restart (the new server re-creates the proxy as it adopts the sandbox)", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-egress-names-restart-"));
    const apiKey = `e2b_${"d".repeat(40)}`;
    const start = () => startTestControlPlane({ dataDir, apiKey, runtime: new ProcessRuntime() });
    let other = await start();
    let restore = setEnv({ ...other.sdkEnv });
    try {
      const s = await Sandbox.create("base", { network: { allowOut: ["api.allowed.test"], denyOut: only } });
      expect(await curl(s, "https://api.allowed.test:8443/")).toMatch(/^tls-ok/);
      restore();
      await other.stopKeepingSandboxes();
      other = await start();
      restore = setEnv({ ...other.sdkEnv });
      const again = await Sandbox.connect(s.sandboxId);
      expect(await curl(again, "https://api.allowed.test:8443/")).toMatch(/^tls-ok/);
      expect(await curl(again, "https://other.test:8443/")).toMatch(/^refused/);
      await again.kill();
      expect(nftChain(`px_${s.sandboxId}`)).toBeUndefined();
    } finally {
      restore();
      await other.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("refuses host-name entries it cannot enforce with a 400 that says why", async () => {
    const cases: [Record<string, string[]>, RegExp][] = [
      [{ allowOut: ["*"] }, /a bare '\*' is not allowed/],
      [{ allowOut: ["*foo.test"] }, /a wildcard is one leading label/],
      [{ allowOut: ["a.*.test"] }, /is not a CIDR block, an IP address or a domain name/],
      [{ denyOut: ["other.test"] }, /domain names are not supported in deny rules/],
    ];
    for (const [network, message] of cases) {
      const err = await rejection(create(network));
      expect(err.message, JSON.stringify(network)).toMatch(/^400: network\./);
      expect(err.message).toMatch(message);
    }
  });
});
