// E2B's `network.rules` on the process runtime, through the real JS SDK: a
// sandbox with rules for a host has its HTTP(S) to that host intercepted by
// its egress proxy, which terminates TLS with the server's egress CA (that
// the sandbox trusts: curl and Python verify it, no -k), sets the rule's
// headers (`${e2b.secrets.<name>}` resolved to the secret's current version
// per request) and opens its own verified TLS to the host. The host is a peer
// in a network namespace of this test's own with its own CA, which the
// server trusts through LOCALE2B_EGRESS_UPSTREAM_CA; it answers a header's
// SHA-256, never its value, so the value never enters the sandbox.
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, Secret } from "e2b";
import pino from "pino";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { originalDestinationUnsupported } from "../../control-plane/runtimes/net/egress-proxy/original-destination.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain } from "../helpers/egress.js";
import { startNamedPeer, type NamedPeer } from "../helpers/named-peer.js";
import { rejection, setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const missing = (await runtime.egressUnsupported()) ?? (await originalDestinationUnsupported());

const VALUE_1 = "sk-rules-first-9f8e7d6c5b4a";
const VALUE_2 = "sk-rules-second-1a2b3c4d5e6f";
const sha = (v: string) => `sha256:${createHash("sha256").update(v).digest("hex")}`;

let cp: TestControlPlane;
let peer: NamedPeer;
let restoreEnv = () => {};
const logLines: string[] = [];
const created: Sandbox[] = [];

beforeAll(async () => {
  if (missing) return;
  peer = await startNamedPeer(["api.allowed.test", "*.allowed.test", "other.test"], (p) => ({
    "api.allowed.test": p.b,
    "ws.allowed.test": p.b,
    "other.test": p.c,
  }));
  const restoreServer = setEnv({ LOCALE2B_DNS: peer.a, LOCALE2B_EGRESS_UPSTREAM_CA: peer.caFile });
  const sink = new Writable({ write: (chunk, _e, cb) => (logLines.push(chunk.toString()), cb()) });
  cp = await startTestControlPlane({ runtime, warmPool: 0, log: pino({ level: "trace" }, sink) });
  const restoreSdk = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  restoreEnv = () => {
    restoreSdk();
    restoreServer();
  };
  await Secret.create("rules-key", VALUE_1);
});

afterAll(async () => {
  for (const s of created) await s.kill().catch(() => undefined);
  await Secret.destroy("rules-key").catch(() => undefined);
  await cp?.close();
  restoreEnv();
  await peer?.close();
});

type Net = Parameters<typeof Sandbox.create>[1] extends infer O ? (O extends { network?: infer N } ? N : never) : never;

async function create(network: Net): Promise<Sandbox> {
  const s = await Sandbox.create("base", { network });
  created.push(s);
  return s;
}

/** `cmd` in the sandbox: stdout, or `failed (exit N)` and stderr's last line. */
async function run(s: Sandbox, cmd: string, user: "user" | "root" = "user"): Promise<string> {
  const r = await s.commands.run(`${cmd} 2>/tmp/err || echo "failed (exit $?) $(tail -1 /tmp/err)"`, { user });
  return r.stdout.trim();
}

const keyRule = (host: string, header = "X-Api-Key") => ({ [host]: [{ transform: { headers: { [header]: `Bearer ${Secret.fill("rules-key")}` } } }] });

describe.skipIf(missing !== undefined)(`network.rules on the process runtime${missing ? ` (skipped: ${missing})` : ""}`, () => {
  it("injects a rule's header into HTTPS (verified by curl and Python, no -k) and plain HTTP; the secret's current version, per request", async () => {
    const s = await create({ rules: { ...keyRule("api.allowed.test"), "*.other.test": [{ transform: { headers: { "X-Plain": "literal" } } }] } });
    expect(await run(s, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
    expect(await run(s, "curl -s -m 10 http://api.allowed.test:8081/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
    const py = `python3 -c "import urllib.request; print(urllib.request.urlopen('https://api.allowed.test:8443/h/x-api-key').read().decode().strip())"`;
    expect(await run(s, py)).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
    // The certificate the client verified is the proxy's, issued by the server's egress CA.
    expect(await run(s, "curl -sv -m 10 -o /dev/null https://api.allowed.test:8443/ 2>&1 | grep -o 'issuer: .*'")).toMatch(/issuer: .*locale2b egress CA/);
    // An existing header of the same name (any case) is replaced, not doubled.
    expect(await run(s, "curl -s -m 10 -H 'x-api-key: mine' https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
    // Bodies stream through both ways.
    expect(await run(s, "head -c 3000000 /dev/zero | tr '\\0' a | curl -s -m 30 --data-binary @- https://api.allowed.test:8443/echo | wc -c")).toBe("3000000");
    // The secret's new version, while the sandbox runs.
    await Secret.update("rules-key", VALUE_2);
    expect(await run(s, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_2}`)}`);
    // The rules read back as given.
    expect((await s.getInfo()).network?.rules).toEqual({ ...keyRule("api.allowed.test"), "*.other.test": [{ transform: { headers: { "X-Plain": "literal" } } }] });
    await Secret.update("rules-key", VALUE_1);
  });

  it("a host without rules is not intercepted: the client sees the real server's certificate", async () => {
    const s = await create({ rules: keyRule("api.allowed.test") });
    // The peer's CA is not trusted inside: verification fails (exit 60), as it would without the proxy.
    expect(await run(s, "curl -s -m 10 https://other.test:8443/")).toMatch(/^failed \(exit 60\)/);
    expect(await run(s, "curl -sv -k -m 10 -o /dev/null https://other.test:8443/ 2>&1 | grep -o 'issuer: .*'")).toMatch(/issuer: CN\s*=\s*locale2b test CA/);
    expect(await run(s, "curl -sk -m 10 https://other.test:8443/h/x-api-key")).toBe("x-api-key=absent");
    // All of its TCP goes through the proxy (a rule's host may be anywhere), and passes untouched.
    expect(nftChain(`px_${s.sandboxId}`)).toMatch(/meta l4proto tcp dnat ip to/);
    expect(await run(s, `curl -s -m 10 http://${peer.c}:8080/`)).toBe(`peer-ok ${peer.c}`);
  });

  it("an unknown secret refuses the request (502, saying why) rather than sending the placeholder", async () => {
    const s = await create({ rules: { "api.allowed.test": [{ transform: { headers: { "X-Api-Key": Secret.fill("no-such-secret") } } }] } });
    const out = await run(s, "curl -s -m 10 -w ' %{http_code}' https://api.allowed.test:8443/h/x-api-key");
    expect(out).toMatch(/secret 'no-such-secret', which does not exist.* 502$/s);
    expect(out).not.toContain("x-api-key=");
  });

  it("updateNetwork gives a running sandbox rules (and its trust in the CA), and takes them away", async () => {
    const s = await create({});
    expect(await run(s, "curl -sk -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe("x-api-key=absent");
    await s.updateNetwork({ rules: keyRule("api.allowed.test") });
    expect(await run(s, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
    await s.updateNetwork({});
    expect(await run(s, "curl -sk -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe("x-api-key=absent");
    expect((await s.getInfo()).network?.rules).toBeUndefined();
  });

  it("rules do not grant access: allowOut/denyOut still decide", async () => {
    const s = await create({ allowOut: ["other.test"], denyOut: ["0.0.0.0/0"], rules: keyRule("api.allowed.test") });
    expect(await run(s, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toMatch(/^failed \(exit (35|56)\)/);
    expect(await run(s, "curl -sk -m 10 https://other.test:8443/h/x-api-key")).toBe("x-api-key=absent");
  });

  it("the secret's value is nowhere in the sandbox, the server's log or the audit log; the audit names its uses", async () => {
    const s = await create({ rules: keyRule("api.allowed.test") });
    expect(await run(s, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
    // A process that keeps an intercepted connection open while the sandbox is searched.
    await s.commands.run("python3 -c \"import urllib.request,time; urllib.request.urlopen('https://api.allowed.test:8443/h/x-api-key').read(); time.sleep(60)\"", { background: true, timeoutMs: 0 });
    // The values are looked for without ever being in a command line or a file of the sandbox: as base64, decoded into grep's stdin.
    const b64 = Buffer.from(`${VALUE_1}\n${VALUE_2}\n`).toString("base64");
    const search = `echo ${b64} | base64 -d | grep -rlsa -f - /proc/[0-9]*/environ /proc/[0-9]*/cmdline /etc /home /tmp /root /usr/local /var; echo searched`;
    for (const user of ["user", "root"] as const) expect((await s.commands.run(search, { user })).stdout.trim(), user).toBe("searched");
    // Every process's memory (envd's included) but the searcher's own, as root and as user (each reads its own
    // processes' only: no CAP_SYS_PTRACE inside); a decoy a root process holds shows the search finds what is there.
    const decoy = `decoy-${Date.now()}-held-in-memory`;
    await s.commands.run(`python3 -c "import base64,time; d = base64.b64decode('${Buffer.from(decoy).toString("base64")}'); time.sleep(60)"`, { background: true, timeoutMs: 0, user: "root" });
    const needles = Buffer.from(`${VALUE_1}\n${VALUE_2}\n${decoy}`).toString("base64");
    const scan = (user: "root" | "user") => s.commands.run(
      `python3 - ${needles} <<'EOF'
import base64, os, sys
needles = base64.b64decode(sys.argv[1]).split(b"\\n")
found = [0] * len(needles)
for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:
    try:
        maps = open(f'/proc/{pid}/maps').read().splitlines(); mem = open(f'/proc/{pid}/mem', 'rb', 0)
    except Exception: continue
    for line in maps:
        a, b = [int(x, 16) for x in line.split()[0].split('-')]
        if 'r' not in line.split()[1] or b - a > 1 << 30: continue
        try: mem.seek(a); chunk = mem.read(b - a)
        except Exception: continue
        for i, n in enumerate(needles):
            if n in chunk: found[i] += 1
print(*found)
EOF`,
      { user, timeoutMs: 120_000 },
    );
    expect((await scan("root")).stdout.trim()).toMatch(/^0 0 [1-9]\d*$/);
    expect((await scan("user")).stdout.trim()).toMatch(/^0 0 \d+$/);
    const audit = await (await fetch(`${cp.workspaceUrl}/audit?limit=10000`, { headers: { "x-api-key": cp.apiKey } })).text();
    expect(audit).toMatch(/"action":"secret\.used"/);
    expect(audit).toContain(s.sandboxId);
    for (const [where, text] of [["the server's log", logLines.join("")], ["the audit log", audit]] as const) {
      expect(text.includes(VALUE_1) || text.includes(VALUE_2), where).toBe(false);
    }
  });

  it("escape: as user and root, the CA key is out of reach, the proxy's port is no control surface, and only the sandbox's own rules resolve secrets", async () => {
    const caKey = join(cp.dataDir, "egress-ca", "ca.key");
    expect(statSync(caKey).mode & 0o777).toBe(0o600);
    expect(statSync(join(cp.dataDir, "egress-ca")).mode & 0o777).toBe(0o700);
    const keyPem = readFileSync(caKey, "utf8");
    const s = await create({ rules: keyRule("api.allowed.test") });
    const other = await create({ rules: { "api.allowed.test": [{ transform: { headers: { "X-Plain": "no secret here" } } }] } });
    const listener = /dnat ip to ([\d.]+:\d+)/.exec(nftChain(`px_${s.sandboxId}`) ?? "")?.[1] ?? "none";
    expect(listener).toBeDefined();
    const keyLine = keyPem.split("\n")[1]!;
    for (const user of ["user", "root"] as const) {
      // The key is neither at its host path nor anywhere in the sandbox's files.
      expect(await run(s, `cat ${caKey}`, user), user).toMatch(/^failed/);
      expect(await run(s, `grep -rlsF -e '${keyLine}' /etc /usr/local /home /tmp /root /var; echo none`, user), user).toBe("none");
      // The listener dialled directly, with garbage, a CONNECT and a proxy-style request: refused, no secret.
      expect(await run(s, `curl -s -m 5 http://${listener}/h/x-api-key`, user), user).toMatch(/^failed/);
      expect(await run(s, `curl -s -m 5 -p -x http://${listener} https://api.allowed.test:8443/h/x-api-key`, user), user).toMatch(/^failed/);
      // A CONNECT to a host with rules (its plain HTTP is intercepted): no tunnel.
      expect(await run(s, "curl -s -m 5 -p -x http://api.allowed.test:8081 https://api.allowed.test:8443/h/x-api-key", user), user).toMatch(/^failed/);
      expect(await run(s, `(printf 'garbage\\r\\n\\r\\n'; sleep 1) | timeout 5 bash -c 'cat > /dev/tcp/${listener.replace(":", "/")}' ; echo sent`, user), user).toMatch(/sent/);
      // A request for a host without rules, on a connection intercepted for one with rules: refused (421), no secret.
      // (Retried on a reset handshake, exit 35, seen once in a clean-clone CI run under load. The likely cause, a
      // conntrack event kept from an earlier connection with the same source port answering for this one, is fixed
      // (redirect-events-unit.test.ts); the retry stays, since a reset leaks nothing and the answer asserted is the 421.)
      let mismatch = "";
      for (let i = 0; i < 3 && (i === 0 || /^failed \(exit 35\)/.test(mismatch)); i++) mismatch = await run(s, "curl -s -m 10 -H 'Host: other.test' https://api.allowed.test:8443/h/x-api-key", user);
      expect(mismatch, user).toMatch(/^locale2b egress proxy: this connection is for 'api.allowed.test'/);
      // The SNI of a host with rules to another address: not intercepted (the name does not lead there).
      expect(await run(s, `curl -sk -m 10 --resolve api.allowed.test:8443:${peer.c} https://api.allowed.test:8443/h/x-api-key`, user), user).toBe("x-api-key=absent");
      // A placeholder the request itself carries is never resolved: not in this sandbox, not in one without a rule for it.
      for (const sbx of [s, other]) {
        expect(await run(sbx, `curl -s -m 10 -H 'X-Mine: \${e2b.secrets.rules-key}' https://api.allowed.test:8443/h/x-mine`, user), user).toBe(`x-mine=${sha("${e2b.secrets.rules-key}")}`);
      }
      expect(await run(other, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key", user), user).toBe("x-api-key=absent");
    }
    // Root cannot take the interception away from inside.
    expect(await run(s, "nft flush ruleset; iptables -t nat -F; echo done", "root")).toMatch(/done/);
    expect(await run(s, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
    expect(execFileSync("ls", ["-l", caKey], { encoding: "utf8" })).toMatch(/^-rw-------/);
  });

  it("rules keep being applied across a control-plane restart (the same CA, the proxy re-created as the sandbox is adopted)", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "locale2b-egress-rules-restart-"));
    const apiKey = `e2b_${"e".repeat(40)}`;
    const start = () => startTestControlPlane({ dataDir, apiKey, runtime: new ProcessRuntime(), warmPool: 0 });
    let other = await start();
    let restore = setEnv({ ...other.sdkEnv });
    try {
      await Secret.create("rules-key", VALUE_1);
      const s = await Sandbox.create("base", { network: { rules: keyRule("api.allowed.test") } });
      expect(await run(s, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
      restore();
      await other.stopKeepingSandboxes();
      other = await start();
      restore = setEnv({ ...other.sdkEnv });
      const again = await Sandbox.connect(s.sandboxId);
      expect(await run(again, "curl -s -m 10 https://api.allowed.test:8443/h/x-api-key")).toBe(`x-api-key=${sha(`Bearer ${VALUE_1}`)}`);
      await again.kill();
    } finally {
      restore();
      await other.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("refuses malformed rules with a 400 that says what is wrong", async () => {
    const cases: [unknown, RegExp][] = [
      [{ "*": [{}] }, /a bare '\*' is not allowed/],
      [{ "10.0.0.1": [{}] }, /IP addresses and CIDR blocks are not supported as rule keys/],
      [{ "a.*.test": [{}] }, /a wildcard is one leading label/],
      [{ "api.test": { transform: {} } }, /must be a list of rules/],
      [{ "api.test": [{ transform: { headers: { "bad name": "x" } } }] }, /not a valid HTTP header name/],
      [{ "api.test": [{ transform: { headers: { Host: "x" } } }] }, /does not let a rule set 'Host'/],
      [{ "api.test": [{ transform: { headers: { "X-A": 5 } } }] }, /must be a string/],
      [{ "api.test": [{ transform: { headers: { "X-A": "${e2b.secrets.open" } } }] }, /malformed secret placeholder/],
      [{ "api.test": [{ transform: { body: "x" } }] }, /unknown field 'body'/],
    ];
    for (const [rules, message] of cases) {
      const res = await fetch(`${cp.url}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": cp.apiKey, "content-type": "application/json" },
        body: JSON.stringify({ templateID: "base", network: { rules } }),
      });
      const body = (await res.json()) as { message: string };
      expect(res.status, JSON.stringify(rules)).toBe(400);
      expect(body.message).toMatch(message);
    }
    const err = await rejection(create({ rules: { "*": [] } }));
    expect(err.message).toMatch(/^400: network\.rules/);
  });
});
