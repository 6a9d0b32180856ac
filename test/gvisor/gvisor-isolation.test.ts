// Ways out of a gVisor sandbox, tried from inside as `user` and as root with
// the real JS SDK: host files, processes and devices, the host's loopback
// services and the control plane, a neighbour sandbox. Then the network
// policy (deny/allow lists, updateNetwork, no internet) against a test peer
// host, and what a dead sandbox leaves behind (limits: gvisor-resources.test.ts). Two sandboxes are shared by the whole file (gVisor is slow).
import { createHash } from "node:crypto";
import { existsSync, lstatSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { lstatOrUndefined } from "../../control-plane/runtimes/gvisor/host-ops.js";
import type { GvisorInstance } from "../../control-plane/runtimes/gvisor/instance.js";
import { dialHybridVsock } from "../../control-plane/transport/hybrid-vsock.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain, uplinkAddress } from "../helpers/egress.js";
import { gvisorMissing, gvisorRuntime } from "../helpers/gvisor.js";
import { startPeerHost, type PeerHost } from "../helpers/peer-host.js";
import { rejection, setEnv, waitFor } from "../helpers/sdk.js";
import { testImagesDir } from "../helpers/vm.js";

const missing = gvisorMissing();
const why = missing ? ` [skipped: ${missing}]` : "";
const TIMEOUT = 300_000;

let cp: TestControlPlane;
let restoreEnv = () => {};
let peer: PeerHost;
/** A peer on private space (10.203.0.0/16): no sandbox reaches it, whatever its allowOut. */
let privatePeer: PeerHost;
let a: Sandbox;
let b: Sandbox;
const both = ["user", "root"] as const;
const sha = (text: string | Buffer) => createHash("sha256").update(text).digest("hex");

/** Runs a shell command; never throws: `[exit] stdout+stderr`. */
async function sh(s: Sandbox, command: string, user?: "root" | "user"): Promise<{ code: number; out: string }> {
  try {
    const r = await s.commands.run(command, { ...(user ? { user } : {}), timeoutMs: 180_000 });
    return { code: r.exitCode, out: `${r.stdout}${r.stderr}` };
  } catch (err) {
    const e = err as { exitCode?: number; stdout?: string; stderr?: string; message: string };
    return { code: e.exitCode ?? -1, out: `${e.stdout ?? ""}${e.stderr ?? e.message}` };
  }
}

const instance = (s: Sandbox) => cp.manager["instances"].get(s.sandboxId) as GvisorInstance;

beforeAll(async () => {
  if (missing) return;
  peer = await startPeerHost();
  privatePeer = await startPeerHost(undefined, { range: "private" });
  cp = await startTestControlPlane({ runtime: gvisorRuntime(), imagesDir: testImagesDir() });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  [a, b] = await Promise.all([Sandbox.create("base", { timeoutMs: 1_800_000 }), Sandbox.create("base", { timeoutMs: 1_800_000 })]);
}, TIMEOUT);

afterAll(async () => {
  restoreEnv();
  await cp?.close();
  await peer?.close();
  await privatePeer?.close();
});

describe.skipIf(missing !== undefined)(`gvisor: escapes from inside fail${why}`, { timeout: TIMEOUT }, () => {
  it("files API: as user /etc/shadow is 403; as root it is the image's, not the host's", async () => {
    const err = await rejection(a.files.read("/etc/shadow"));
    expect(err.message).toMatch(/permission denied/);
    const inside = await a.files.read("/etc/shadow", { user: "root" });
    expect(inside).toMatch(/^root:/);
    expect(sha(inside)).not.toBe(sha(readFileSync("/etc/shadow")));
  });

  it.each(both)("as %s: sees nothing of the host: its files, the data dir, its processes, its devices", async (user) => {
    const r = await sh(a, `ls ${cp.dataDir} 2>&1; ps -e -o comm=; ls /dev`, user);
    expect(r.out).toMatch(/No such file or directory/);
    expect(r.out).toMatch(/locale2b-init/);
    expect(r.out).not.toMatch(/vitest|runsc|node_modules|\bkvm\b|\bsda\b|\bvda\b|\bloop\d/);
    const dev = await sh(a, "cat /dev/kvm 2>&1 || echo no-kvm; mknod /tmp/mem c 1 1 2>&1 && head -c 16 /tmp/mem | od -An -tx1 | tr -d ' \\n'; echo", user);
    expect(dev.out).toContain("no-kvm");
    // mknod only changes gVisor's own view: no host memory behind it.
    expect(dev.out).not.toMatch(/[1-9a-f]{8}/);
  });

  it.each(both)("as %s: the hostname and mounts change only gVisor's view, never the host's", async (user) => {
    const hostname = readFileSync("/proc/sys/kernel/hostname", "utf8");
    const pre = user === "root" ? "" : "sudo -n ";
    const r0 = await sh(a, `${pre}sh -c 'hostname evil-${user}; mount -t tmpfs none /mnt; echo x > /mnt/x; echo 1 > /proc/sys/vm/drop_caches' 2>&1`, user);
    // gVisor always sets no_new_privs: sudo (set-uid) cannot work, root work uses user: 'root'. (runsc 20240729's
    // sudo says "no new privileges"; later ones' that its effective uid is not 0.)
    if (user === "user") expect(r0.out).toMatch(/no new privileges|effective uid is not 0/);
    expect(readFileSync("/proc/sys/kernel/hostname", "utf8")).toBe(hostname);
    expect(existsSync("/mnt/x")).toBe(false);
    // gVisor's own cgroups (named after the container, i.e. the sandbox id, which is also its hostname), never the host's.
    const r = await sh(a, "cat /proc/self/cgroup", user);
    expect(r.out).toMatch(/^\d+:pids:\//m);
    expect(r.out).not.toMatch(/locale2b-gvisor|process_api/);
  });

  it("ordinary root work stays inside: apt-style writes to /etc and /usr as root, user: 'root' files", async () => {
    const r = await sh(a, "echo ok > /etc/locale2b-gv && mkdir -p /usr/local/lib/l2bgv && echo x > /usr/local/lib/l2bgv/f && cat /etc/locale2b-gv && id -u", "root");
    expect(r).toEqual({ code: 0, out: "ok\n0\n" });
    await a.files.write("/etc/locale2b-gv-files", "by the files API", { user: "root" });
    expect(existsSync("/etc/locale2b-gv-files")).toBe(false);
    expect((await sh(a, "echo hi > /opt/locale2b-gv && cat /opt/locale2b-gv", "root")).out).toBe("hi\n");
    for (const p of ["/etc/locale2b-gv", "/usr/local/lib/l2bgv", "/opt/locale2b-gv"]) expect(existsSync(p)).toBe(false);
    expect((await sh(b, "ls /etc/locale2b-gv /opt/locale2b-gv 2>&1")).code).not.toBe(0);
  });

  it("a neighbour's loopback-only server and its eth0 address are unreachable", async () => {
    await b.commands.run("python3 -m http.server 8111 --bind 127.0.0.1 --directory /tmp", { background: true, timeoutMs: 0 });
    await b.commands.run("python3 -m http.server 8112 --bind 0.0.0.0 --directory /tmp", { background: true, timeoutMs: 0 });
    await waitFor(async () => (await sh(b, "curl -s -o /dev/null http://127.0.0.1:8111/ && curl -s -o /dev/null http://127.0.0.1:8112/")).code === 0, "b's servers");
    const bAddr = /inet (\S+)\//.exec((await sh(b, "ip -4 -o addr show eth0")).out)![1]!;
    for (const user of both) {
      expect((await sh(a, "curl -s -m 5 http://127.0.0.1:8111/", user)).code, user).not.toBe(0);
      expect((await sh(a, `curl -s -m 5 http://${bAddr}:8112/`, user)).code, user).not.toBe(0);
    }
  });

  it("envd's socket in the shared host dir, swapped for a symlink to a host socket as root, never makes the control plane dial that socket", async () => {
    const dir = mkdtempSync(join(tmpdir(), "l2b-lure-"));
    const lure = join(dir, "lure.sock");
    const dialed: string[] = [];
    const server = net.createServer((s) => {
      s.on("data", (d) => dialed.push(d.toString()));
      s.on("error", () => undefined);
    });
    await new Promise<void>((r) => server.listen(lure, r));
    try {
      const r = await sh(a, `ls -la /run/locale2b-host/; rm -f /run/locale2b-host/envd.sock; ln -s ${lure} /run/locale2b-host/envd.sock && echo swapped`, "root");
      expect(r.out).toContain("swapped");
      // The control plane goes on dialing the real socket (moved out of the shared dir at start): new connections work.
      const again = await Sandbox.connect(a.sandboxId);
      expect((await again.commands.run("echo still-mine")).stdout).toBe("still-mine\n");
      expect((await sh(a, "cat /etc/hostname")).code).toBe(0);
      // Where the control plane dials (a fresh connection, not a pooled one) is out of the sandbox's reach.
      const dialPath = instance(a).socketPath;
      expect(dialPath).toBe(join(cp.dataDir, "sandboxes", a.sandboxId, "envd.sock"));
      const sock = await dialHybridVsock(dialPath, 49983, 10_000);
      sock.destroy();
      expect(dialed).toEqual([]);
    } finally {
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the pause's ack file and signals, forged from inside, never make the host write through a symlink; pause and resume still work", async () => {
    const dir = mkdtempSync(join(tmpdir(), "l2b-ack-"));
    const victim = join(dir, "victim");
    writeFileSync(victim, "host data");
    try {
      // As user: PID 1 takes no signal from it.
      expect((await sh(b, "kill -URG 1 2>&1; echo rc=$?")).out).toMatch(/rc=1|not permitted/);
      // As root: the ack file becomes a symlink to a host file, and the init is told to quiesce and listen again.
      // (In the background: the quiesce cuts every connection, this command's stream too.)
      const forge = `ln -sf ${victim} /run/locale2b-host/envd.sock.quiesced && kill -URG 1 && kill -WINCH 1 && touch /tmp/forged`;
      await b.commands.run(`nohup sh -c 'sleep 0.3; ${forge}' >/dev/null 2>&1 &`, { user: "root" });
      await new Promise((r) => setTimeout(r, 1_500));
      expect(await b.pause()).toBe(true);
      const again = await Sandbox.connect(b.sandboxId);
      expect((await again.commands.run("ls /tmp/forged && echo after-forgery")).stdout).toContain("after-forgery\n");
      expect(readFileSync(victim, "utf8")).toBe("host data");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the host itself (its gateway address, its uplink address, the control plane's port) is unreachable", async () => {
    const port = new URL(cp.url).port;
    const gw = /default via (\S+)/.exec((await sh(a, "ip route show default")).out)![1]!;
    expect(gw).toMatch(/^10\.201\./);
    const host = uplinkAddress();
    const targets = [`${gw}:${port}`, `127.0.0.1:${port}`, ...(host ? [`${host}:${port}`, `${host}:22`] : []), "169.254.169.254:80"];
    for (const user of both) {
      for (const t of targets) {
        const r = await sh(a, `curl -s -m 5 -o /dev/null -w %{http_code} http://${t}/health`, user);
        expect(r.code, `${user} → ${t}: ${r.out}`).not.toBe(0);
      }
    }
  });
});

/** A Unix socket on the host that records every connection made to it. */
async function lureSocket(): Promise<{ path: string; dialed: () => number; close: () => void }> {
  const dir = mkdtempSync(join(tmpdir(), "l2b-lure-"));
  const path = join(dir, "lure.sock");
  let n = 0;
  const server = net.createServer((s) => {
    n++;
    s.on("error", () => undefined);
    s.destroy();
  });
  await new Promise<void>((r) => server.listen(path, r));
  return { path, dialed: () => n, close: () => (server.close(), rmSync(dir, { recursive: true, force: true })) };
}

describe.skipIf(missing !== undefined)(`gvisor: the gofer's mounts, the host-socket directory, /proc and /sys, a restored sandbox${why}`, { timeout: TIMEOUT }, () => {
  it("as root, deleting, renaming, chmod-ing and appending to the template's files changes only this sandbox's layer: the template on the host and a neighbour are untouched", async () => {
    const lower = findTemplateImage("base", testImagesDir())!.rootfsDir;
    const before = { issue: sha(readFileSync(join(lower, "etc/issue"))), unzip: statSync(join(lower, "usr/bin/unzip")).mode };
    const r = await sh(a, "rm /usr/bin/zip && mv /usr/bin/xz /usr/bin/xz-moved && chmod 4777 /usr/bin/unzip && echo pwned >> /etc/issue && ln /etc/issue /etc/issue-link && echo done", "root");
    expect(r.out).toContain("done");
    expect(existsSync(join(lower, "usr/bin/zip"))).toBe(true);
    expect(existsSync(join(lower, "usr/bin/xz"))).toBe(true);
    expect(existsSync(join(lower, "usr/bin/xz-moved"))).toBe(false);
    expect(statSync(join(lower, "usr/bin/unzip")).mode).toBe(before.unzip);
    expect(sha(readFileSync(join(lower, "etc/issue")))).toBe(before.issue);
    expect((await sh(b, "ls /usr/bin/zip /usr/bin/xz && stat -c %a /usr/bin/unzip && grep -c pwned /etc/issue")).out).toBe("/usr/bin/xz\n/usr/bin/zip\n755\n0\n");
  });

  it.each(both)("as %s: /proc and /sys are gVisor's: no host path, process, mount or device; /sys is read-only", async (user) => {
    const r = await sh(a, "cat /proc/self/mountinfo /proc/mounts; ls /proc; cat /proc/net/dev; cat /proc/1/cmdline | tr '\\0' ' '; echo", user);
    expect(r.out).not.toContain(cp.dataDir);
    expect(r.out).not.toContain(testImagesDir());
    expect(r.out).not.toMatch(/process_api|runsc|\/dev\/vd|\/dev\/loop/);
    expect(r.out).toContain("/sbin/locale2b-init --hybrid-listen");
    // Only the sandbox's own processes (a handful) and devices (lo and its eth0, never the host's).
    expect(r.out.split("\n").filter((l) => /^\d+$/.test(l)).length).toBeLessThan(30);
    const devices = [...r.out.matchAll(/^\s*([\w.-]+):\s+\d+/gm)].map((m) => m[1]);
    expect(devices).toContain("lo");
    expect(devices.every((d) => d === "lo" || /^eth\d+$/.test(d))).toBe(true);
    const w = await sh(a, "touch /sys/x 2>&1; mkdir /sys/y 2>&1; cat /proc/kcore 2>/dev/null | wc -c; echo end", user);
    expect(w.out).toMatch(/Read-only file system|Permission denied/);
    expect(w.out).toMatch(/^0\nend\n$/m); // no kcore
  });

  it("the host-socket directory: what root makes there (symlinks, a fifo, its own socket) reaches nothing on the host", async () => {
    const lure = await lureSocket();
    const hostDir = instance(a).layout.hostDir;
    try {
      const script = [
        `ln -sfn / /run/locale2b-host/root-link && sha256sum /run/locale2b-host/root-link/etc/shadow | cut -c1-64`,
        `ln -sfn ${lure.path} /run/locale2b-host/lure-link`,
        `python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(5)\ntry: s.connect("/run/locale2b-host/lure-link"); print("connected")\nexcept OSError as e: print("refused", e.errno)'`,
        `python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(5)\ntry: s.connect("${lure.path}"); print("connected")\nexcept OSError as e: print("refused", e.errno)'`,
        `mkfifo /run/locale2b-host/fifo 2>&1; echo fifo-$?`,
      ].join("; ");
      const r = await sh(a, script, "root");
      const [shadowSha] = r.out.split("\n");
      // The link resolves in gVisor's view: the image's /etc/shadow, not the host's.
      expect(shadowSha).toBe(sha(await a.files.read("/etc/shadow", { user: "root" })));
      expect(shadowSha).not.toBe(sha(readFileSync("/etc/shadow")));
      expect(r.out).not.toContain("connected");
      expect(lure.dialed()).toBe(0);
      // On the host they are plain entries in the sandbox's own directory; nothing outside it changed.
      expect(lstatSync(join(hostDir, "root-link")).isSymbolicLink()).toBe(true);
      expect(readdirSync(hostDir)).toContain("lure-link");
      // The control plane still dials its own socket.
      expect((await sh(a, "echo still-mine")).out).toBe("still-mine\n");
    } finally {
      lure.close();
      await sh(a, "rm -f /run/locale2b-host/root-link /run/locale2b-host/lure-link /run/locale2b-host/fifo", "root");
    }
  });

  it("a restored sandbox trusts nothing its old self left in the host dir: a process planting symlinks to a host socket across the pause never gets the control plane to dial it", async () => {
    const lure = await lureSocket();
    try {
      // Restored with its memory, this loop goes on planting after the resume, racing the init's new socket.
      const plant = `while true; do for n in envd.sock envd.sock.tmp; do ln -sfn ${lure.path} /run/locale2b-host/$n 2>/dev/null; done; sleep 0.01; done`;
      await b.commands.run(`nohup sh -c '${plant}' >/dev/null 2>&1 &`, { user: "root" });
      await new Promise((r) => setTimeout(r, 500));
      expect(await b.pause()).toBe(true);
      // Its root can break its own resume this way (the init cannot bind its socket under a planted name), as it
      // could by killing envd: the resume then fails and says so. What must never happen is a dial of the lure.
      const resumed = await Sandbox.connect(b.sandboxId).then(
        async (again) => (await again.commands.run("echo after-restore")).stdout,
        (err: Error) => err.message,
      );
      expect(resumed).toMatch(/^after-restore\n$|envd's socket did not come back/);
      expect(lure.dialed()).toBe(0);
      expect(lstatOrUndefined(instance(b).socketPath)?.isSymbolicLink() ?? false).toBe(false);
    } finally {
      lure.close();
      await b.kill().catch(() => undefined);
    }
  });
});

describe.skipIf(missing !== undefined)(`gvisor: egress rules${why}`, { timeout: TIMEOUT }, () => {
  const reach = async (s: Sandbox, addr: string, user?: "root" | "user") => {
    const out = (await sh(s, `curl -s -m 10 http://${addr}:${peer.port}/ || echo "refused (exit $?)"`, user)).out.trim();
    return out.startsWith("peer-ok") ? "ok" : out;
  };

  it("private space (a LAN, a VPC) is refused as user and as root, also when allowOut names it", async () => {
    for (const user of ["user", "root"] as const) expect(await reach(a, privatePeer.a, user)).toBe("refused (exit 7)");
    const s = await Sandbox.create("base", { network: { allowOut: [`${privatePeer.a}/32`], denyOut: ["0.0.0.0/0"] }, timeoutMs: 600_000 });
    try {
      for (const user of ["user", "root"] as const) expect(await reach(s, privatePeer.a, user)).toBe("refused (exit 7)");
    } finally {
      await s.kill();
    }
  });

  it("reaches the peer with internet access; denyOut refuses one address; updateNetwork lifts and sets rules", async () => {
    expect(await reach(a, peer.a)).toBe("ok");
    const s = await Sandbox.create("base", { network: { denyOut: [`${peer.a}/32`] }, timeoutMs: 600_000 });
    try {
      expect(await reach(s, peer.a)).toMatch(/^refused/);
      expect(await reach(s, peer.b)).toBe("ok");
      await s.updateNetwork({});
      expect(await reach(s, peer.a)).toBe("ok");
      await s.updateNetwork({ denyOut: ["0.0.0.0/0"], allowOut: [`${peer.b}/32`] });
      expect(await reach(s, peer.a)).toMatch(/^refused/);
      expect(await reach(s, peer.b)).toBe("ok");
      expect(nftChain(`sbx_${s.sandboxId}`)).toBeDefined();
    } finally {
      await s.kill();
    }
    expect(nftChain(`sbx_${s.sandboxId}`)).toBeUndefined();
  });

  it("without internet access nothing is reachable; an allow list given later opens just that", async () => {
    const s = await Sandbox.create("base", { allowInternetAccess: false, timeoutMs: 600_000 });
    try {
      expect(await reach(s, peer.a)).toMatch(/^refused/);
      await s.updateNetwork({ allowOut: [`${peer.a}/32`], allowInternetAccess: false });
      expect(await reach(s, peer.a)).toBe("ok");
      expect(await reach(s, peer.b)).toMatch(/^refused/);
    } finally {
      await s.kill();
    }
  });
});

describe.skipIf(missing !== undefined)(`gvisor: clean-up${why}`, { timeout: TIMEOUT }, () => {
  it("a sandbox that dies leaves no directory, cgroup, network namespace, device or rules behind", async () => {
    const s = await Sandbox.create("base", { timeoutMs: 600_000 });
    const inst = instance(s);
    const dir = `${cp.dataDir}/sandboxes/${s.sandboxId}`;
    const device = inst.netDevice!;
    const netns = `/run/netns/${(inst.persisted as { netns: string }).netns}`;
    const cgroupDirs = Object.values(((inst.persisted as { cgroup: { dirs: Record<string, string> } }).cgroup ?? { dirs: {} }).dirs);
    expect(cgroupDirs.length).toBeGreaterThan(0);
    expect(existsSync(netns)).toBe(true);
    process.kill(inst.pid, "SIGKILL");
    const left = () => [dir, `/sys/class/net/${device}`, netns, ...cgroupDirs].filter((p) => existsSync(p));
    await waitFor(() => left().length === 0, () => `clean-up (left: ${left().join(", ")})`);
    expect(nftChain(`sbx_${s.sandboxId}`)).toBeUndefined();
    expect((await cp.store.getSandbox(s.sandboxId))!.state).toBe("killed");
  });
});
