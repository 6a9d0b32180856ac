// `locale2b doctor` (built CLI, child processes) and the host checks behind it:
// the accelerator choice on this host and on fixture hosts.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { hostChecks } from "../../control-plane/cli/doctor-command.js";
import { accelFor } from "../../control-plane/host/accel.js";
import type { HostCheck } from "../../control-plane/host/checks.js";
import { runtimeNames } from "../../control-plane/runtimes/registry.js";
import { runCli } from "../helpers/cli.js";

// Each runtime's own checks (runtimes/<name>/checks.ts, in the registry's order), then the images'.
const NAMES = [
  "runsc",
  "qemu-system-x86_64",
  "qemu-img",
  "vhost-device-vsock",
  "acceleration",
  "firecracker",
  "debootstrap",
  "mkfs.ext4",
  "gcc",
  "guest kernel",
  "template base",
  "nft",
];

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "locale2b-doctor-"));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const hostHasHwVirt = /^flags\s*:.*\b(vmx|svm)\b/m.test(readFileSync("/proc/cpuinfo", "utf8"));

describe("locale2b doctor", () => {
  it("prints an aligned table of every check and exits by the qemu runtime's needs", async () => {
    const r = await runCli(["doctor"], { LOCALE2B_IMAGES_DIR: tempDir(), LOCALE2B_KERNEL: "" });
    expect(r.stderr).toBe("");
    const lines = r.stdout.split("\n");
    expect(lines[0]).toMatch(/^STATUS\s+CHECK\s+DETAIL\s+FIX$/);
    const rows = lines.slice(1, 1 + NAMES.length);
    const checkCol = lines[0]!.indexOf("CHECK");
    const detailCol = lines[0]!.indexOf("DETAIL");
    NAMES.forEach((name, i) => {
      expect(rows[i]!.slice(0, checkCol)).toMatch(/^(ok|MISSING|todo|n\/a)\s+$/);
      expect(rows[i]!.slice(checkCol, detailCol).trimEnd()).toBe(name);
    });
    // An empty images dir: kernel and template are to do, with the command that builds them.
    expect(r.stdout).toMatch(/^todo\s+guest kernel\s+not built in .*scripts\/build-kernel\.sh/m);
    expect(r.stdout).toMatch(/^todo\s+template base\s+.*locale2b template build base/m);
    expect(r.stdout).toMatch(/^qemu runtime: /m);
    const qemuMissing = /^MISSING\s/m.test(r.stdout);
    expect(r.code).toBe(qemuMissing ? 1 : 0);
  });

  it("--json prints the checks as JSON", async () => {
    const r = await runCli(["doctor", "--json"]);
    const out = JSON.parse(r.stdout) as { ok: boolean; imagesDir: string; checks: HostCheck[] };
    expect(out.checks.map((c) => c.name)).toEqual(NAMES);
    for (const c of out.checks) {
      expect(typeof c.ok).toBe("boolean");
      expect([...runtimeNames(), "images", "optional"]).toContain(c.required);
      expect(c.detail.length).toBeGreaterThan(0);
      if (!c.ok && c.required !== "optional") expect(c.fix).toBeTruthy();
    }
    expect(out.ok).toBe(out.checks.every((c) => c.ok || c.required !== "qemu"));
    expect(r.code).toBe(out.ok ? 0 : 1);
  });

  it("exits 1 and says what to do when a qemu runtime tool is missing", async () => {
    const r = await runCli(["doctor"], { LOCALE2B_QEMU: "/nonexistent/qemu-system-x86_64", LOCALE2B_VHOST_VSOCK: "/nonexistent/vhost" });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^MISSING\s+qemu-system-x86_64\s+LOCALE2B_QEMU=\/nonexistent\/qemu-system-x86_64 is not an executable file\s+.*apt-get install -y qemu-system-x86/m);
    expect(r.stdout).toMatch(/^MISSING\s+vhost-device-vsock\s+.*setup-host/m);
    expect(r.stdout).toMatch(/qemu runtime: not ready, missing qemu-system-x86_64, vhost-device-vsock/);
  });

  it("--runtime NAME: the exit status follows that runtime's own checks; an unknown name is a usage error", async () => {
    const noRunsc = { LOCALE2B_RUNSC: "/nonexistent/runsc" };
    const gvisor = await runCli(["doctor", "--runtime", "gvisor", "--json"], noRunsc);
    const out = JSON.parse(gvisor.stdout) as { ok: boolean; runtime: string; checks: HostCheck[] };
    expect(out).toMatchObject({ ok: false, runtime: "gvisor" });
    expect(out.checks.find((c) => c.name === "runsc")).toMatchObject({ ok: false, required: "gvisor" });
    expect(gvisor.code).toBe(1);
    const text = await runCli(["doctor", "--runtime", "gvisor"], noRunsc);
    expect(text.stdout).toMatch(/^MISSING\s+runsc\s+LOCALE2B_RUNSC=\/nonexistent\/runsc is not an executable file/m);
    // The process runtime needs none of the VM tools: a missing QEMU does not fail it.
    const proc = await runCli(["doctor", "--runtime", "process"], { LOCALE2B_QEMU: "/nonexistent/qemu-system-x86_64", ...noRunsc });
    expect(proc.code).toBe(0);
    expect(proc.stdout).toMatch(/^n\/a\s+qemu-system-x86_64/m);
    const bad = await runCli(["doctor", "--runtime", "bogus"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/unknown runtime 'bogus' \(known: process, gvisor, qemu, firecracker\)/);
  });

  it("--help and bad options", async () => {
    const help = await runCli(["doctor", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: locale2b doctor/);
    const bad = await runCli(["doctor", "--bogus"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/locale2b doctor --help/);
    expect((await runCli(["--help"])).stdout).toMatch(/^\s+doctor\s/m);
  });
});

describe("host checks", () => {
  it("finds a built kernel in the images dir", async () => {
    const images = tempDir();
    mkdirSync(join(images, "kernels", "0123456789abcdef"), { recursive: true });
    writeFileSync(join(images, "kernels", "0123456789abcdef", "vmlinux"), "ELF");
    writeFileSync(join(images, "kernels", "current"), "0123456789abcdef\n");
    const env: NodeJS.ProcessEnv = { ...process.env, LOCALE2B_IMAGES_DIR: images };
    delete env.LOCALE2B_KERNEL;
    const kernel = (await hostChecks(env)).find((c) => c.name === "guest kernel")!;
    expect(kernel).toMatchObject({ ok: true, required: "images" });
    expect(kernel.detail).toContain(join(images, "kernels", "0123456789abcdef", "vmlinux"));
  });

  it.skipIf(hostHasHwVirt)("accelFor picks TCG on this host (PVM or no vmx/svm) and says why", async () => {
    const a = await accelFor();
    expect(a.accel).toBe("tcg");
    expect(a.reason).toMatch(/PVM|vmx\/svm|\/dev\/kvm/);
  });

  it.runIf(hostHasHwVirt)("accelFor on a host with vmx/svm: kvm when /dev/kvm opens", async () => {
    const a = await accelFor();
    expect(["kvm", "tcg"]).toContain(a.accel);
    expect(a.reason.length).toBeGreaterThan(0);
  });

  describe("accelFor on fixture hosts", () => {
    const fixture = (flags: string, opts: { kvm?: boolean; pvm?: boolean } = {}) => {
      const d = tempDir();
      writeFileSync(join(d, "cpuinfo"), `processor\t: 0\nflags\t\t: fpu sse2 ${flags} lm\n`);
      if (opts.kvm !== false) writeFileSync(join(d, "kvm"), "");
      writeFileSync(join(d, "modules"), opts.pvm ? "kvm_pvm 118784 0 - Live 0x0\nkvm 1 1 kvm_pvm, Live 0x0\n" : "kvm 1 0 - Live 0x0\n");
      return { kvm: join(d, "kvm"), cpuinfo: join(d, "cpuinfo"), modules: join(d, "modules"), pvmModule: join(d, "no-such-module") };
    };

    it("kvm with vmx or svm and a usable /dev/kvm", async () => {
      expect(await accelFor(fixture("vmx"))).toMatchObject({ accel: "kvm", reason: expect.stringContaining("vmx") });
      expect(await accelFor(fixture("svm"))).toMatchObject({ accel: "kvm", reason: expect.stringContaining("svm") });
    });

    it("tcg when the CPU shows no vmx/svm", async () => {
      const a = await accelFor(fixture("hypervisor"));
      expect(a.accel).toBe("tcg");
      expect(a.reason).toMatch(/no vmx\/svm/);
    });

    it("tcg when KVM is PVM, even with vmx", async () => {
      const a = await accelFor(fixture("vmx", { pvm: true }));
      expect(a.accel).toBe("tcg");
      expect(a.reason).toMatch(/PVM/);
    });

    it("tcg when there is no /dev/kvm", async () => {
      const a = await accelFor(fixture("vmx", { kvm: false }));
      expect(a.accel).toBe("tcg");
      expect(a.reason).toMatch(/^no .*kvm/);
    });
  });
});
