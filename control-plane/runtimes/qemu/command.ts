import { readFileSync } from "node:fs";
import { join } from "node:path";
import { GUEST } from "../../images/layout.js";

/** A sandbox's files under its directory (spec.dir). */
export interface VmLayout {
  dir: string;
  /** Copy-on-write overlay of the template's rootfs.ext4 (qcow2 with a backing file). */
  disk: string;
  /** vhost-user socket between QEMU and vhost-device-vsock. */
  vhostUser: string;
  /** The hybrid-vsock socket the control plane dials (`CONNECT 49983\n`). */
  vsock: string;
  qmp: string;
  /** The guest's serial console (kernel, init and envd output). */
  console: string;
  /** QEMU's and vhost-device-vsock's own stderr. */
  vmmLog: string;
}

export function vmLayout(dir: string): VmLayout {
  return {
    dir,
    disk: join(dir, "disk.qcow2"),
    vhostUser: join(dir, "vhost-user.sock"),
    vsock: join(dir, "vsock.sock"),
    qmp: join(dir, "qmp.sock"),
    console: join(dir, "console.log"),
    vmmLog: join(dir, "vmm.log"),
  };
}

export interface VmSpec {
  sandboxId: string;
  kernel: string;
  layout: VmLayout;
  cpuCount: number;
  memoryMB: number;
  accel: "kvm" | "tcg";
  /** Host TSC frequency in kHz (TCG: tells the guest kernel not to calibrate, which can hang). */
  tscKHz?: number;
  envdLogLevel?: string;
  /**
   * true: internet access through QEMU's user-mode network (NAT, no inbound);
   * a tap: the host's device for a VM with an egress policy (nft filters it);
   * false: no NIC at all.
   */
  network?: boolean | TapNetwork;
  /** More devices (volumes: virtiofs.ts). */
  extraArgs?: string[];
}

/** A VM's tap device and its /30 (host side `gateway`, the guest configured by the kernel's `ip=`). */
export interface TapNetwork {
  tap: string;
  mac: string;
  guest: string;
  gateway: string;
  netmask: string;
  dns: string;
}

/** QEMU user-mode networking's fixed addresses (guest, gateway, DNS). */
export const SLIRP = { guest: "10.0.2.15", gateway: "10.0.2.2", dns: "10.0.2.3", netmask: "255.255.255.0" } as const;

/** The guest CID: every VM has its own vhost-device-vsock, so they can all use 3. */
export const GUEST_CID = 3;

/** The guest kernel's command line (the same for Firecracker, bar the console quirks). */
export function kernelCmdline(spec: Pick<VmSpec, "sandboxId" | "accel" | "tscKHz" | "envdLogLevel" | "network">, now = Date.now()): string {
  const args = [
    "console=ttyS0",
    "root=/dev/vda",
    "rw",
    "rootfstype=ext4",
    `init=${GUEST.init}`,
    "reboot=k",
    "panic=-1",
    "pci=off",
    "quiet",
    "loglevel=4",
  ];
  // Under TCG the kernel's TSC calibration against the PIT hung 1 boot in 3 (vm-notes).
  if (spec.accel === "tcg") {
    args.push("tsc=reliable");
    if (spec.tscKHz) args.push(`tsc_early_khz=${spec.tscKHz}`);
    args.push("mitigations=off");
  }
  // The kernel configures eth0 itself (CONFIG_IP_PNP); the DNS server shows in /proc/net/pnp,
  // which the template's /etc/resolv.conf points at.
  const n = spec.network === true ? SLIRP : spec.network || undefined;
  if (n) args.push(`ip=${n.guest}::${n.gateway}:${n.netmask}::eth0:off:${n.dns}`);
  args.push(`l2b.hostname=${spec.sandboxId}`, `l2b.epoch=${Math.floor(now / 1000)}`);
  if (spec.envdLogLevel) args.push(`l2b.envd_log=${spec.envdLogLevel}`);
  return args.join(" ");
}

/**
 * qemu-system-x86_64 -M microvm: virtio-mmio block for the root disk,
 * vhost-user vsock (the memory must be a shared memfd for the vhost-user
 * daemon), the serial console to a file, QMP on a Unix socket, no network,
 * no display, no firmware beyond the microvm's own.
 */
export function qemuArgs(spec: VmSpec, now = Date.now()): string[] {
  const l = spec.layout;
  const mem = `${spec.memoryMB}M`;
  return [
    "-name", `locale2b-${spec.sandboxId}`,
    "-M", "microvm,acpi=on,rtc=on,memory-backend=mem",
    "-accel", spec.accel,
    "-cpu", spec.accel === "kvm" ? "host" : "max",
    "-smp", String(spec.cpuCount),
    "-m", mem,
    "-object", `memory-backend-memfd,id=mem,size=${mem},share=on`,
    "-nodefaults", "-no-user-config", "-nographic",
    // A guest reboot (panic=-1, `reboot`) ends QEMU: the sandbox is reported dead, not boot-looping.
    "-no-reboot",
    "-kernel", spec.kernel,
    "-append", kernelCmdline(spec, now),
    "-drive", `id=root,file=${l.disk},format=qcow2,if=none,discard=unmap`,
    "-device", "virtio-blk-device,drive=root",
    "-chardev", `socket,id=vhu,path=${l.vhostUser}`,
    "-device", "vhost-user-vsock-device,chardev=vhu",
    "-serial", `file:${l.console}`,
    "-qmp", `unix:${l.qmp},server=on,wait=off`,
    ...(spec.network === true ? ["-netdev", "user,id=net0", "-device", "virtio-net-device,netdev=net0"] : []),
    ...(spec.network && spec.network !== true
      ? ["-netdev", `tap,id=net0,ifname=${spec.network.tap},script=no,downscript=no`, "-device", `virtio-net-device,netdev=net0,mac=${spec.network.mac}`]
      : []),
    ...(spec.extraArgs ?? []),
  ];
}

export function vhostVsockArgs(l: VmLayout): string[] {
  return ["--vm", `guest-cid=${GUEST_CID},socket=${l.vhostUser},uds-path=${l.vsock}`];
}

/** The host's TSC frequency in kHz, from /proc/cpuinfo's "cpu MHz" (undefined when unknown). */
export function hostTscKHz(cpuinfo = "/proc/cpuinfo"): number | undefined {
  try {
    const m = /^cpu MHz\s*:\s*([\d.]+)/m.exec(readFileSync(cpuinfo, "utf8"));
    return m ? Math.round(Number(m[1]) * 1000) : undefined;
  } catch {
    return undefined;
  }
}
