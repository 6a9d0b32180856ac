// Ways out of a sandbox on the default (process) runtime, tried from inside
// as `user` and as root, through commands and through the files API, with
// the real JS SDK against a real control plane: each must fail, while the
// ordinary E2B uses of root (writing /etc, sudo, user: 'root' files) work
// and stay inside the sandbox. Needs root (sandbox mode): skipped, saying so,
// when not.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readlinkSync, statSync } from "node:fs";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import type { ProcessInstance } from "../../control-plane/runtimes/process/instance.js";
import { startTestControlPlane, type TestControlPlane } from "../helpers/control-plane.js";
import { nftChain, uplinkAddress } from "../helpers/egress.js";
import { fill, memoryBurst, processBomb, sh } from "../helpers/resource-probes.js";
import { rejection, setEnv } from "../helpers/sdk.js";

const runtime = new ProcessRuntime();
const caps = await runtime.capabilities();
const skip = caps.mode !== "sandbox" ? "needs the control plane to run as root (sandbox mode)" : caps.missing;

let cp: TestControlPlane;
let restoreEnv = () => {};
let a: Sandbox;
let b: Sandbox;
const sha = (text: string | Buffer) => createHash("sha256").update(text).digest("hex");
const token = (s: Sandbox) => (s as unknown as { envdAccessToken?: string }).envdAccessToken ?? "";

function instance(s: Sandbox): ProcessInstance {
  return cp.manager["instances"].get(s.sandboxId) as ProcessInstance;
}

beforeAll(async () => {
  if (skip) return;
  cp = await startTestControlPlane({ runtime });
  restoreEnv = setEnv({ ...cp.sdkEnv, E2B_DEBUG: undefined, E2B_DOMAIN: undefined });
  [a, b] = await Promise.all([Sandbox.create({ timeoutMs: 600_000 }), Sandbox.create({ timeoutMs: 600_000 })]);
});

afterAll(async () => {
  restoreEnv();
  await cp?.close();
});

const both = ["user", "root"] as const;

describe.skipIf(skip !== undefined)(`escapes through the files API${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("as user, /etc/shadow is refused with 403 / permission denied, also by a ../ path; as root it is the image's, not the host's", async () => {
    const err = await rejection(a.files.read("/etc/shadow"));
    expect(err.message).toMatch(/permission denied: user 'user' cannot read '\/etc\/shadow'/);
    const raw = await fetch(`${cp.url}/files?path=../../../etc/shadow`, {
      headers: { "e2b-sandbox-id": a.sandboxId, "e2b-sandbox-port": "49983", "x-access-token": token(a) },
    });
    expect(raw.status).toBe(403);
    expect(((await raw.json()) as { message: string }).message).toMatch(/permission denied/);
    const inside = await a.files.read("/etc/shadow", { user: "root" });
    expect(inside).toMatch(/^root:/);
    expect(sha(inside)).not.toBe(sha(readFileSync("/etc/shadow")));
  });

  it("as user, /etc/passwd cannot be written (403), nor a file in a root-owned directory; the files are unchanged", async () => {
    const before = await a.files.read("/etc/passwd");
    const err = await rejection(a.files.write("/etc/passwd", "user::0:0::/root:/bin/bash\n"));
    expect(err.message).toMatch(/permission denied: user 'user' cannot write '\/etc\/passwd'/);
    const created = await rejection(a.files.write("/usr/local/bin/evil", "#!/bin/sh\n"));
    expect(created.message).toMatch(/permission denied/);
    expect(await a.files.read("/etc/passwd")).toBe(before);
    expect((await sh(a, "id -u")).out.trim()).toBe("1000");
  });

  it("a symlink planted in the sandbox does not redirect a write out of it, as user or as root", async () => {
    await sh(a, "ln -sf /etc/cron.d/locale2b-escape ~/planted && ln -sfn / ~/hostroot");
    const asUser = await rejection(a.files.write("/home/user/planted", "* * * * * root touch /tmp/pwned\n"));
    expect(asUser.message).toMatch(/permission denied/);
    // As root the link is followed, but inside the sandbox's own root: the host is untouched.
    await a.files.write("/home/user/planted", "# harmless\n", { user: "root" });
    expect((await sh(a, "cat /etc/cron.d/locale2b-escape")).out).toBe("# harmless\n");
    expect(existsSync("/etc/cron.d/locale2b-escape")).toBe(false);
    await a.files.write("/home/user/hostroot/locale2b-escape-root", "x", { user: "root" });
    expect(existsSync("/locale2b-escape-root")).toBe(false);
  });

  it("files written as root stay in the sandbox and belong to root there, not on the host", async () => {
    await a.files.write("/etc/locale2b-root-file", "inside\n", { user: "root" });
    expect((await sh(a, "stat -c %U:%G /etc/locale2b-root-file")).out.trim()).toBe("root:root");
    expect(existsSync("/etc/locale2b-root-file")).toBe(false);
    const info = await a.files.getInfo("/etc/locale2b-root-file", { user: "root" });
    expect(info.owner).toBe("root");
  });

  it("listing and watching follow the user's permissions", async () => {
    await sh(a, "sudo mkdir -p /root/secret && sudo touch /root/secret/x");
    expect((await rejection(a.files.list("/root"))).message).toMatch(/permission denied/);
    expect((await a.files.list("/root", { user: "root" })).map((e) => e.name)).toContain("secret");
    expect((await rejection(a.files.watchDir("/root", () => undefined))).message).toMatch(/permission denied/);
  });
});

describe.skipIf(skip !== undefined)(`escapes through commands, as user and as root${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it.each(both)("as %s: root inside is an unprivileged host uid, with no capability over the host", async (user) => {
    const r = await sh(a, "cat /proc/self/status | grep -E '^(Uid|CapEff|CapBnd|Seccomp):'", user);
    expect(r.out).toMatch(/Seccomp:\s+2/);
    // Docker's default capability set at most, never CAP_SYS_ADMIN (21) or CAP_SYS_MODULE (16).
    const bnd = BigInt(`0x${/CapBnd:\s+([0-9a-f]+)/.exec(r.out)![1]}`);
    expect(bnd & (1n << 21n)).toBe(0n);
    expect(bnd & (1n << 16n)).toBe(0n);
    // On the host, every process of the sandbox runs under a shifted uid: none is host root.
    for (const pid of instance(a).cgroup!.pids().filter((p) => p !== instance(a).pid)) {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const uid = Number(/^Uid:\s+(\d+)/m.exec(status)![1]);
      expect(uid, `host pid ${pid}`).toBeGreaterThanOrEqual(runtime.idRange().base);
    }
  });

  it.each(both)("as %s: cannot remount /, mount, unmount /proc or create a user namespace", async (user) => {
    for (const cmd of ["mount -o remount,rw /", "mount -t tmpfs none /mnt", "umount -l /proc", "unshare -Ur true", "unshare -m true"]) {
      const r = await sh(a, user === "root" ? cmd : `${cmd} 2>&1 || sudo -n ${cmd}`, user);
      expect(r.code, `${user}: ${cmd}: ${r.out}`).not.toBe(0);
    }
  });

  it.each(both)("as %s: sees nothing of the host: files, data dir, processes, environment, devices", async (user) => {
    const r = await sh(a, `ls ${cp.dataDir}; ls /dev; ps -e -o comm=; cat /proc/1/environ | tr '\\0' '\\n' | grep -c E2B_ || true`, user);
    expect(r.out).toMatch(/No such file or directory/);
    expect(r.out).not.toMatch(/\bkvm\b|\bsda\b|\bvda\b|\bloop\d/);
    // Only the sandbox's own processes: its init, envd and this command.
    expect(r.out).toMatch(/locale2b-init/);
    expect(r.out).not.toMatch(/vitest|process_api/);
    const host = await sh(a, `test -e /dev/kvm || echo no-kvm; mknod /tmp/mem c 1 1 2>&1 || echo no-mknod`, user);
    expect(host.out).toContain("no-kvm");
    expect(host.out).toContain("no-mknod");
  });

  it.each(both)("as %s: cannot write host sysctls, see or change cgroups, or reach cgroup release agents", async (user) => {
    const cmds = [
      "echo 1 > /proc/sys/kernel/sysrq",
      "echo 0 > /proc/sys/net/ipv4/ip_forward",
      "mount -t cgroup -o memory cgroup /mnt",
      "test -n \"$(ls -A /sys/fs/cgroup)\"",
      "echo 1 > /sys/kernel/mm/ksm/run",
    ];
    for (const cmd of cmds) {
      const r = await sh(a, `sh -c '${cmd.replace(/'/g, "'\\''")}'`, user);
      expect(r.code, `${user}: ${cmd}: ${r.out}`).not.toBe(0);
    }
    // Its cgroup namespace shows only its own group, as "/": no sandbox id.
    const cg = await sh(a, "cat /proc/self/cgroup", user);
    expect(cg.out).not.toContain(a.sandboxId);
    expect(cg.out.trim().split("\n").every((l) => l.endsWith(":/"))).toBe(true);
  });

  it.each(both)("as %s: the boot id is the sandbox's own (not the host's, not its neighbour's) and cannot be changed or uncovered", async (user) => {
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    const mine = (await sh(a, "cat /proc/sys/kernel/random/boot_id", user)).out.trim();
    const theirs = (await sh(b, "cat /proc/sys/kernel/random/boot_id", user)).out.trim();
    const host = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    expect(mine).toMatch(uuid);
    expect(theirs).toMatch(uuid);
    expect(mine).not.toBe(host);
    expect(mine).not.toBe(theirs);
    for (const cmd of [
      "echo 00000000-0000-4000-8000-000000000000 > /proc/sys/kernel/random/boot_id",
      "umount /proc/sys/kernel/random/boot_id",
      "umount -l /proc/sys/kernel/random/boot_id",
      "mount -o remount,rw /proc/sys/kernel/random/boot_id",
      "ls -a /dev | grep -q boot-id",
    ]) {
      const r = await sh(a, `sh -c '${cmd}'`, user);
      expect(r.code, `${user}: ${cmd}: ${r.out}`).not.toBe(0);
    }
    expect((await sh(a, "cat /proc/sys/kernel/random/boot_id", user)).out.trim()).toBe(mine);
  });

  it.each(both)("as %s: only fds 0-2 are open in a new process, whatever the server inherited", async (user) => {
    const r = await sh(a, "ls /proc/self/fd | sort -n | tr '\\n' ' '", user);
    // 3 is ls's own directory handle.
    expect(r.out.trim()).toBe("0 1 2 3");
  });

  it("the kernel interfaces the seccomp filter refuses say EPERM (keyctl, bpf, perf_event_open, userfaultfd, AF_VSOCK)", async () => {
    const py = `
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [("keyctl", 250, (0, 0)), ("bpf", 321, (0, 0, 0)), ("perf_event_open", 298, (0, 0, -1, -1, 0)), ("userfaultfd", 323, (0,)), ("kexec_load", 246, (0, 0, 0, 0))]:
    r = libc.syscall(nr, *args)
    print(name, r, errno.errorcode.get(ctypes.get_errno()))
try:
    socket.socket(40, socket.SOCK_STREAM)
    print("vsock ok")
except OSError as e:
    print("vsock", errno.errorcode.get(e.errno))
`;
    await a.files.write("/tmp/sc.py", py);
    for (const user of both) {
      const r = await sh(a, "python3 /tmp/sc.py", user);
      for (const name of ["keyctl", "bpf", "perf_event_open", "userfaultfd", "kexec_load"]) expect(r.out, `${user} ${name}`).toMatch(new RegExp(`^${name} -1 EPERM$`, "m"));
      expect(r.out).toMatch(/^vsock EAFNOSUPPORT$/m);
    }
  });

  it("setuid ping (the base image has one) is root only inside the sandbox: on the host, a shifted uid in the sandbox's user namespace", async (ctx) => {
    if ((await sh(a, "test -u /usr/bin/ping")).code !== 0) ctx.skip("this base image has no setuid ping (an older build: locale2b template build base)");
    const h = await a.commands.run("ping -i 0.5 -c 120 127.0.0.7", { background: true, timeoutMs: 0 });
    try {
      let pid: number | undefined;
      for (let i = 0; i < 100 && pid === undefined; i++) {
        pid = instance(a)
          .cgroup!.pids()
          .find((p) => {
            try {
              return readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0").includes("127.0.0.7");
            } catch {
              return false;
            }
          });
        if (pid === undefined) await new Promise((r) => setTimeout(r, 50));
      }
      expect(pid, "the ping process, among the sandbox's").toBeDefined();
      // Whatever ping holds (root's uid while it opens its raw socket, CAP_NET_RAW), it holds in the
      // sandbox's user namespace, as one of the sandbox's host uids: no capability over the host.
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const [ruid, euid] = /^Uid:\s+(\d+)\s+(\d+)/m.exec(status)!.slice(1).map(Number);
      for (const uid of [ruid!, euid!]) expect(uid).toBeGreaterThanOrEqual(runtime.idRange().base);
      expect(readlinkSync(`/proc/${pid}/ns/user`)).not.toBe(readlinkSync("/proc/self/ns/user"));
      expect(readlinkSync(`/proc/${pid}/ns/net`)).not.toBe(readlinkSync("/proc/self/ns/net"));
      expect((await sh(a, "ping -c1 -W5 127.0.0.1")).out).toMatch(/1 received/);
    } finally {
      await h.kill();
    }
  });

  it("ordinary root work stays inside: apt-style writes to /etc and /usr, sudo, user: 'root' files", async () => {
    const r = await sh(a, "sudo sh -c 'echo ok > /etc/locale2b-apt && mkdir -p /usr/local/lib/l2b && echo x > /usr/local/lib/l2b/f' && cat /etc/locale2b-apt && sudo -n id -u");
    expect(r).toEqual({ code: 0, out: "ok\n0\n" });
    expect((await sh(a, "echo hi > /opt/locale2b-root && cat /opt/locale2b-root", "root")).out).toBe("hi\n");
    expect(existsSync("/etc/locale2b-apt")).toBe(false);
    expect(existsSync("/usr/local/lib/l2b")).toBe(false);
    expect(existsSync("/opt/locale2b-root")).toBe(false);
    // The neighbour's image is untouched by it.
    expect((await sh(b, "ls /etc/locale2b-apt /opt/locale2b-root 2>&1")).code).not.toBe(0);
  });
});

describe.skipIf(skip !== undefined)(`network: sandboxes, the host and the control plane are out of reach${skip ? ` (skipped: ${skip})` : ""}`, () => {
  const hostAddr = uplinkAddress();

  it("a neighbour's loopback-only server, its eth0 address and its abstract Unix sockets are unreachable", async () => {
    await b.commands.run("python3 -m http.server 8111 --bind 127.0.0.1 --directory /tmp", { background: true, timeoutMs: 0 });
    await b.commands.run("python3 -m http.server 8112 --bind 0.0.0.0 --directory /tmp", { background: true, timeoutMs: 0 });
    const abstract = `import socket,time
s=socket.socket(socket.AF_UNIX); s.bind("\\0locale2b-abstract"); s.listen(); time.sleep(120)`;
    await b.files.write("/tmp/abs.py", abstract);
    await b.commands.run("python3 /tmp/abs.py", { background: true, timeoutMs: 0 });
    for (let i = 0; i < 100; i++) {
      if ((await sh(b, "curl -s -o /dev/null -w %{http_code} http://127.0.0.1:8111/ && curl -s -o /dev/null http://127.0.0.1:8112/")).code === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const bAddr = /inet (\S+)\//.exec((await sh(b, "ip -4 -o addr show eth0")).out)![1]!;
    for (const user of both) {
      expect((await sh(a, "curl -s -m 5 http://127.0.0.1:8111/", user)).code, user).not.toBe(0);
      expect((await sh(a, `curl -s -m 5 http://${bAddr}:8112/`, user)).code, user).not.toBe(0);
      const conn = await sh(a, `python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("\\0locale2b-abstract")'`, user);
      expect(conn.out, user).toMatch(/ConnectionRefusedError|No such file/);
    }
  });

  it("the host itself (its gateway address, its uplink address, the control plane's port) is unreachable", async () => {
    const port = new URL(cp.url).port;
    const gw = /default via (\S+)/.exec((await sh(a, "ip route show default")).out)![1]!;
    const targets = [`${gw}:${port}`, `127.0.0.1:${port}`, ...(hostAddr ? [`${hostAddr}:${port}`, `${hostAddr}:22`] : []), `169.254.169.254:80`];
    for (const user of both) {
      for (const t of targets) {
        const r = await sh(a, `curl -s -m 5 -o /dev/null -w %{http_code} http://${t}/health`, user);
        expect(r.code, `${user} → ${t}: ${r.out}`).not.toBe(0);
      }
      // No IPv6 path either: an all-nodes ping on eth0 is answered by the sandbox's own link-local
      // address (which shows the ping went out, once its address is past DAD), never by the host's
      // end of the veth.
      const own = /inet6 (fe80::[0-9a-f:]+)\//.exec((await sh(a, "ip -6 addr show dev eth0 scope link")).out)?.[1];
      let v6 = "";
      for (let i = 0; own && i < 5 && !v6.includes(`from ${own}%`); i++) v6 = (await sh(a, "ping -6 -c2 -i0.5 -W2 ff02::1%eth0", user)).out;
      const others = [...v6.matchAll(/bytes from (fe80::[0-9a-f:]+)%/g)].map((m) => m[1]).filter((x) => x !== own);
      expect(others, v6).toEqual([]);
    }
  });
});

describe.skipIf(skip !== undefined)(`resources fail the offender, not the sandbox or its neighbours${skip ? ` (skipped: ${skip})` : ""}`, () => {
  it("a burst of small processes over the memory limit gets some of them killed; envd and the sandbox live", async () => {
    const r = await sh(a, memoryBurst());
    expect(Number(/killed (\d+)/.exec(r.out)?.[1]), r.out).toBeGreaterThan(0);
    expect((await sh(a, "echo alive")).out).toBe("alive\n");
    expect((await sh(b, "echo neighbour")).out).toBe("neighbour\n");
  });

  it("/dev/shm is size-limited and charged to the sandbox: a 900 MiB file fails, the sandbox lives", async () => {
    const r = await sh(a, fill("/dev/shm/big", 900));
    expect(r.out).toMatch(/No space left on device/);
    expect((await sh(a, "echo alive")).out).toBe("alive\n");
  });

  it("a process bomb stops at the sandbox's pids limit; the sandbox and its neighbour still start processes", async () => {
    await a.files.write("/tmp/bomb.py", processBomb);
    const r = await sh(a, "python3 /tmp/bomb.py");
    const n = Number(/stopped (\d+)/.exec(r.out)?.[1]);
    expect(n, r.out).toBeGreaterThan(100);
    expect(n).toBeLessThan(1100);
    expect((await sh(a, "echo alive")).out).toBe("alive\n");
    expect((await sh(b, "echo neighbour")).out).toBe("neighbour\n");
  });

  it("diskSizeMB is enforced: writing past it is ENOSPC inside, and the host's disk holds no more than the limit", async () => {
    const r = await sh(a, "dd if=/dev/urandom of=/home/user/big bs=1M count=1500 2>&1 | grep -c 'No space left on device'");
    expect(r.out.trim()).toBe("1");
    const disk = `${cp.dataDir}/sandboxes/${a.sandboxId}/disk.img`;
    expect(statSync(disk).blocks * 512).toBeLessThan(1100 * 1024 * 1024);
    // The files API says 507 when the disk is full, and the sandbox goes on once space is freed.
    expect((await rejection(a.files.write("/home/user/more", new ArrayBuffer(64 << 20)))).message).toMatch(/507|space/i);
    await sh(a, "rm -f /home/user/big");
    expect((await sh(a, "echo alive > /home/user/ok && cat /home/user/ok")).out).toBe("alive\n");
  });

  it("a sandbox that dies leaves no directory, cgroup, network device or rules behind", async () => {
    const s = await Sandbox.create();
    const inst = instance(s);
    const dir = `${cp.dataDir}/sandboxes/${s.sandboxId}`;
    const device = inst.netDevice!;
    const cgroupDirs = Object.values((inst.cgroup!.record as { dirs: Record<string, string> }).dirs);
    expect(existsSync(dir)).toBe(true);
    process.kill(inst.pid, "SIGKILL");
    const gone = async () => {
      for (let i = 0; i < 100; i++) {
        if (!existsSync(dir) && !existsSync(`/sys/class/net/${device}`) && cgroupDirs.every((d) => !existsSync(d))) return true;
        await new Promise((r) => setTimeout(r, 100));
      }
      return false;
    };
    expect(await gone(), `left behind: ${[dir, `/sys/class/net/${device}`, ...cgroupDirs].filter(existsSync).join(", ")}`).toBe(true);
    expect(nftChain(`sbx_${s.sandboxId}`)).toBeUndefined();
    expect(() => cp.manager.get(s.sandboxId)).toThrow(/not found/);
  });
});
