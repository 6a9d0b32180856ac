import { spawn } from "node:child_process";
import type { HybridVsockAgent } from "../../control-plane/transport/hybrid-vsock.js";
import { selfCpuSeconds } from "../lib/cpu.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable } from "../lib/report.js";
import { directClient, startTrue } from "../lib/sandboxes.js";
import { median, msSince, p95 } from "../lib/stats.js";
import { cpuSecondsWithChildren, type RuntimeSide } from "./cp.js";

// 2. exec round trip over hybrid vsock (VM) vs the process runtime's Unix socket

const WARMUP = 5;

/** For information: spawn /bin/true here with envd's stdio for a stdin:false process, wait for close. */
function localTrue(): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/true", [], { stdio: ["ignore", "pipe", "pipe"] });
    child.once("error", reject);
    child.once("close", (code) => (code === 0 ? resolve() : reject(new Error(`/bin/true exited ${code}`))));
  });
}

interface Variant {
  name: string;
  /** The sandbox's host processes, whose CPU is counted; empty for the local spawn. */
  pids: number[];
  run: () => Promise<void>;
  times: number[];
  sandboxCpu: number;
  selfCpu: number;
}

export async function benchVmExec(pair: { vm: RuntimeSide; proc: RuntimeSide }): Promise<GoalResult[]> {
  const n = envInt("LOCALE2B_BENCH_VM_EXEC_N", 50);
  heading(
    `vm 2/5: exec round trip of /bin/true straight to envd (Connect JSON over HTTP/1.1, no control plane in the path; N=${n} each after ${WARMUP} warm-up, interleaved)`,
  );
  const agents: HybridVsockAgent[] = [];
  try {
    const variant = (name: string, pids: number[], run: () => Promise<void>): Variant => ({ name, pids, run, times: [], sandboxCpu: 0, selfCpu: 0 });
    const direct = (side: RuntimeSide) => {
      const d = directClient(side.sb);
      agents.push(d.agent);
      return variant(side.label, side.pids, () => startTrue(d.client));
    };
    const variants = [direct(pair.proc), direct(pair.vm), variant("local spawn('/bin/true') to close (information)", [], localTrue)];
    for (let i = 0; i < WARMUP; i++) for (const x of variants) await x.run();
    globalThis.gc?.();
    for (let i = 0; i < n; i++) {
      for (let k = 0; k < variants.length; k++) {
        const x = variants[(i + k) % variants.length]!;
        const c0 = cpuSecondsWithChildren(x.pids);
        const s0 = selfCpuSeconds();
        const t0 = performance.now();
        await x.run();
        x.times.push(msSince(t0));
        x.selfCpu += selfCpuSeconds() - s0;
        x.sandboxCpu += cpuSecondsWithChildren(x.pids) - c0;
      }
    }
    const [procV, vmV] = variants as [Variant, Variant, Variant];
    const mProc = median(procV.times);
    const per = (s: number) => fmtMs((s / n) * 1000);
    printTable(
      ["variant", "median", "p95", "/ process", "sandbox CPU/call", "this process CPU/call"],
      variants.map((x) => [x.name, fmtMs(median(x.times)), fmtMs(p95(x.times)), fmtRatio(median(x.times) / mProc), x.pids.length ? per(x.sandboxCpu) : "-", per(x.selfCpu)]),
    );
    const ratio = median(vmV.times) / mProc;
    console.log(
      `vm / process: ${fmtRatio(ratio)}, +${fmtMs(median(vmV.times) - mProc)} per call. Both are the same envd and init from the template's\n` +
        "rootfs, dialed with a HybridVsockAgent (`CONNECT 49983` handshake, keep-alive) on the sandbox's socket: the VM's through\n" +
        "vhost-device-vsock and virtio-vsock into the guest, the process runtime's served by its init on the host. X-Access-Token is\n" +
        "the one the control plane gave envd through /init. sandbox CPU/call: user+system time of the sandbox's host processes\n" +
        "(QEMU + vhost-device-vsock; the process sandbox's init + envd, with the commands they reaped), averaged over the calls.",
    );
    return [{ benchmark: "vm", metric: "exec /bin/true direct, vm vs process runtime", value: `${fmtRatio(ratio)} (${fmtMs(median(vmV.times))})`, goal: "(information)", ok: true }];
  } finally {
    for (const a of agents) a.destroy();
  }
}
