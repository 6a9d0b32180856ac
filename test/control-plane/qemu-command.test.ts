// The QEMU command line the qemu runtime builds: what the guest, the
// vhost-user vsock daemon and the control plane rely on. (The real boot is
// test/vm/qemu-sdk.test.ts.)
import { describe, expect, it } from "vitest";
import { kernelCmdline, qemuArgs, vhostVsockArgs, vmLayout } from "../../control-plane/runtimes/qemu/command.js";
import { guestVolumes, virtiofsQemuArgs } from "../../control-plane/runtimes/qemu/virtiofs.js";

const layout = vmLayout("/data/sandboxes/abc");
const spec = { sandboxId: "abc", kernel: "/k/vmlinux", layout, cpuCount: 2, memoryMB: 512, accel: "tcg" as const, tscKHz: 2_100_000 };

function option(args: string[], name: string): string[] {
  return args.flatMap((a, i) => (a === name ? [args[i + 1]!] : []));
}

describe("qemu command", () => {
  it("boots a microvm with shared memfd memory (vhost-user needs it), the overlay disk and vhost-user vsock", () => {
    const args = qemuArgs(spec, 1_700_000_000_000);
    expect(option(args, "-M")[0]).toMatch(/^microvm,.*memory-backend=mem/);
    expect(option(args, "-object")).toContain("memory-backend-memfd,id=mem,size=512M,share=on");
    expect(option(args, "-m")).toEqual(["512M"]);
    expect(option(args, "-smp")).toEqual(["2"]);
    expect(option(args, "-accel")).toEqual(["tcg"]);
    expect(option(args, "-drive")[0]).toBe(`id=root,file=${layout.disk},format=qcow2,if=none,discard=unmap`);
    expect(option(args, "-device")).toEqual(["virtio-blk-device,drive=root", "vhost-user-vsock-device,chardev=vhu"]);
    expect(option(args, "-chardev")).toEqual([`socket,id=vhu,path=${layout.vhostUser}`]);
    expect(option(args, "-qmp")).toEqual([`unix:${layout.qmp},server=on,wait=off`]);
    expect(option(args, "-serial")).toEqual([`file:${layout.console}`]);
    expect(args).not.toContain("-netdev");
    expect(args).toContain("-no-reboot");
  });

  it("starts the image's init with the sandbox's hostname and the host's clock; TCG gets a fixed TSC", () => {
    const line = kernelCmdline(spec, 1_700_000_000_999);
    expect(line.split(" ")).toEqual(expect.arrayContaining(["root=/dev/vda", "init=/sbin/locale2b-init", "l2b.hostname=abc", "l2b.epoch=1700000000", "tsc=reliable", "tsc_early_khz=2100000"]));
    expect(kernelCmdline({ ...spec, accel: "kvm" })).not.toMatch(/tsc=/);
  });

  it("internet access: a user-mode NIC the kernel configures itself; none without it", () => {
    const args = qemuArgs({ ...spec, network: true });
    expect(option(args, "-netdev")).toEqual(["user,id=net0"]);
    expect(option(args, "-device")).toContain("virtio-net-device,netdev=net0");
    expect(kernelCmdline({ ...spec, network: true })).toMatch(/ ip=10\.0\.2\.15::10\.0\.2\.2:255\.255\.255\.0::eth0:off:10\.0\.2\.3/);
  });

  it("an egress policy: a tap NIC on the sandbox's /30 instead of user-mode NAT", () => {
    const tap = { tap: "l2babcdef012345", mac: "06:00:01:02:03:04", guest: "10.201.0.6", gateway: "10.201.0.5", netmask: "255.255.255.252", dns: "10.255.255.53" };
    const args = qemuArgs({ ...spec, network: tap });
    expect(option(args, "-netdev")).toEqual(["tap,id=net0,ifname=l2babcdef012345,script=no,downscript=no"]);
    expect(option(args, "-device")).toContain("virtio-net-device,netdev=net0,mac=06:00:01:02:03:04");
    expect(kernelCmdline({ ...spec, network: tap })).toMatch(/ ip=10\.201\.0\.6::10\.201\.0\.5:255\.255\.255\.252::eth0:off:10\.255\.255\.53 /);
    expect(option(qemuArgs({ ...spec, network: false }), "-netdev")).toEqual([]);
  });

  it("volumes: one vhost-user-fs device per volume on its virtiofsd's socket, mounted by tag at its path", () => {
    const args = qemuArgs({ ...spec, extraArgs: virtiofsQemuArgs(layout.dir, 2) }).join(" ");
    expect(args).toContain("-chardev socket,id=vfs0,path=/data/sandboxes/abc/virtiofs-0.sock -device vhost-user-fs-device,chardev=vfs0,tag=l2bvol0");
    expect(args).toContain("-chardev socket,id=vfs1,path=/data/sandboxes/abc/virtiofs-1.sock -device vhost-user-fs-device,chardev=vfs1,tag=l2bvol1");
    expect(args).toContain("memory-backend-memfd,id=mem,size=512M,share=on");
    expect(args).toContain("-global virtio-mmio.force-legacy=false");
    expect(qemuArgs(spec).join(" ")).not.toContain("vhost-user-fs");
    expect(guestVolumes([{ path: "/mnt/a" }, { path: "/srv/b" }])).toEqual([
      { tag: "l2bvol0", path: "/mnt/a" },
      { tag: "l2bvol1", path: "/srv/b" },
    ]);
  });

  it("runs one vhost-device-vsock per VM whose socket speaks the hybrid-vsock handshake", () => {
    expect(vhostVsockArgs(layout)).toEqual(["--vm", `guest-cid=3,socket=${layout.vhostUser},uds-path=${layout.vsock}`]);
  });
});
