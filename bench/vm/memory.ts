import type { Client } from "@connectrpc/connect";
import type { Process } from "../../gen/ts/process/process_pb.js";
import type { SandboxHandle } from "../lib/control-plane.js";
import type { GoalResult } from "../lib/goal.js";
import { fmtMiB, fmtRatio, heading, printTable } from "../lib/report.js";
import { max, median, min } from "../lib/stats.js";
import { MiB, procStatusMemory, vmPids, type InProcessControlPlane } from "./cp.js";

// 5. host memory per VM beyond the guest's RAM (sampled on part 1's VMs, printed last)

export interface VmMemorySample {
  /** The guest's configured RAM (QEMU -m), bytes. */
  configured: number;
  qemu: { rss: number; anon: number; file: number; shmem: number };
  vhost: { rss: number; anon: number; file: number; shmem: number };
  /** The guest's own /proc/meminfo, bytes. */
  guest: { total: number; free: number; available: number };
}

/** The stdout of `cmd args…` run by Start (Connect), as text; throws unless it exits 0. */
export async function runOutput(client: Client<typeof Process>, cmd: string, args: string[]): Promise<string> {
  const chunks: Uint8Array[] = [];
  let exitCode: number | undefined;
  for await (const res of client.start({ process: { cmd, args }, stdin: false })) {
    const e = res.event?.event;
    if (e?.case === "data" && e.value.output.case === "stdout") chunks.push(e.value.output.value);
    else if (e?.case === "end") exitCode = e.value.exitCode;
  }
  if (exitCode !== 0) throw new Error(`${cmd} ${args.join(" ")}: exited ${exitCode}`);
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * One VM's memory, host and guest side, read right after its first command:
 * QEMU's and vhost-device-vsock's /proc/<pid>/status, and the guest's
 * /proc/meminfo read by a command in the guest (through `client`).
 */
export async function sampleVmMemory(h: InProcessControlPlane, sb: SandboxHandle, client: Client<typeof Process>): Promise<VmMemorySample> {
  const text = await runOutput(client, "cat", ["/proc/meminfo"]);
  const kb = (field: string) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text);
    if (!m) throw new Error(`no ${field} in the guest's /proc/meminfo`);
    return Number(m[1]) * 1024;
  };
  const guest = { total: kb("MemTotal"), free: kb("MemFree"), available: kb("MemAvailable") };
  const pids = vmPids(h, sb.id);
  const qemu = procStatusMemory(pids.qemu);
  const vhost = procStatusMemory(pids.vhost);
  if (!qemu || !vhost) throw new Error(`sandbox ${sb.id}: QEMU (${pids.qemu}) or vhost-device-vsock (${pids.vhost}) is gone`);
  const configured = ((await h.cp.store.getSandbox(sb.id))?.memoryMB ?? 0) * MiB;
  return { configured, qemu, vhost, guest };
}

/** Own memory of a VMM process: resident pages that are not the guest RAM memfd (anonymous + file-backed). */
const own = (p: VmMemorySample["qemu"]) => p.anon + p.file;

/** Prints the memory table of part 1's VMs. */
export function reportVmMemory(samples: VmMemorySample[], accelLabel: string): GoalResult[] {
  heading(`vm 5/5: host memory per VM beyond the guest's RAM (${samples.length} VM(s) of part 1, each read right after its first command; ${accelLabel})`);
  if (!samples.length) {
    console.log("no VM booted in part 1: nothing to measure");
    return [{ benchmark: "vm", metric: "host memory per VM beyond guest RAM", value: "could not run", goal: "-", ok: false }];
  }
  const row = (name: string, values: number[]) => [name, fmtMiB(median(values)), `${fmtMiB(min(values))}..${fmtMiB(max(values))}`];
  const overhead = samples.map((s) => own(s.qemu) + own(s.vhost));
  const configured = samples.map((s) => s.configured);
  printTable(
    [`per VM (median over N=${samples.length})`, "median", "min..max"],
    [
      row("configured guest memory (QEMU -m)", configured),
      row("QEMU VmRSS", samples.map((s) => s.qemu.rss)),
      row("  guest RAM resident on the host (QEMU RssShmem: the memfd's pages touched since boot)", samples.map((s) => s.qemu.shmem)),
      row("  QEMU's own (RssAnon + RssFile: heap, TCG translation cache, libraries)", samples.map((s) => own(s.qemu))),
      row("vhost-device-vsock VmRSS", samples.map((s) => s.vhost.rss)),
      row("  its own (RssAnon + RssFile; its RssShmem maps the same guest pages as QEMU's)", samples.map((s) => own(s.vhost))),
      row("guest's view: MemTotal - MemFree (used, with page cache)", samples.map((s) => s.guest.total - s.guest.free)),
      row("guest's view: MemTotal - MemAvailable", samples.map((s) => s.guest.total - s.guest.available)),
      row("guest's view: MemTotal (-m minus what the kernel reserved)", samples.map((s) => s.guest.total)),
      row("host memory per VM beyond guest RAM = QEMU own + vhost-device-vsock own", overhead),
      row("host memory per VM, all in = QEMU VmRSS + vhost-device-vsock own", samples.map((s) => s.qemu.rss + own(s.vhost))),
      row("(for comparison) QEMU VmRSS + vhost VmRSS - (guest's MemTotal - MemFree)", samples.map((s) => s.qemu.rss + s.vhost.rss - (s.guest.total - s.guest.free))),
    ],
  );
  const m = median(overhead);
  console.log(
    `beyond guest RAM: ${fmtMiB(m)} per VM, ${fmtRatio(m / median(configured))} of its configured ${fmtMiB(median(configured))}.\n` +
      "Definition: the guest's RAM is a shared memfd (memory-backend-memfd, share=on, for vhost-user), so its resident pages are\n" +
      "RssShmem in QEMU (and again, as far as it touched them, in vhost-device-vsock, which maps all of it). What a VM costs the\n" +
      "host beyond its RAM is therefore the two processes' RssAnon + RssFile. Not counted: the kernel's own memory for the VM\n" +
      "(page tables, KVM state) and the page cache of the disk image. The last row is the naive subtraction: it counts guest pages\n" +
      "twice (both processes map them) and pages the guest touched and then freed (the host keeps them), so it overstates.",
  );
  return [{ benchmark: "vm", metric: "host memory per VM beyond guest RAM", value: fmtMiB(m), goal: "(information)", ok: true }];
}
