import type { Client } from "@connectrpc/connect";
import { closeSync, openSync, readdirSync, readSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Process } from "../../gen/ts/process/process_pb.js";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import { routedProcessClient } from "../lib/clients.js";
import type { GoalResult } from "../lib/goal.js";
import { envInt, fmtMs, fmtRatio, heading, printTable, verdict } from "../lib/report.js";
import { proxyAgent } from "../lib/sandboxes.js";
import { median, p95 } from "../lib/stats.js";
import { startInProcessControlPlane } from "./cp.js";
import { sampleVmMemory, type VmMemorySample } from "./memory.js";

// 1. guest boot: create -> envd ready -> first command output

/** The documented goal: a microVM's create -> envd ready on real KVM. */
export const GOAL_KVM_BOOT_MS = 300;

/** What the E2B JS SDK's `commands.run("echo ready")` starts (as in the sandboxes benchmark). */
const READY_CMD = { cmd: "/bin/bash", args: ["-l", "-c", "echo ready"], envs: { TERM: "xterm-256color", LANG: "C.UTF-8", LC_ALL: "C.UTF-8" } };

export interface Accel {
  accel: "kvm" | "tcg";
  reason: string;
}

/** Host-observed times (performance.now()) of what a booting VM writes and creates, relative to nothing yet. */
interface ConsoleMarks {
  /** The sandbox dir's disk.qcow2 was created (qemu-img create: the runtime started), from its birth time. */
  disk?: number;
  /** QEMU opened its serial console file (console.log's birth time): QEMU is starting. */
  console?: number;
  /** The first `locale2b-init:` line showed in console.log (polled): the kernel has booted and run the init. */
  init?: number;
  /** `locale2b-init: envd started (pid N)` showed. */
  envdStarted?: number;
  /** envd's own `envd listening` log event showed (envd logs to the console). */
  envdListening?: number;
}

const POLL_MS = 10;
const epochToPerf = (epochMs: number) => epochMs - performance.timeOrigin;

/**
 * Watches `<dataDir>/sandboxes/` for the one sandbox being created, then
 * its console.log every POLL_MS, noting when the init's and envd's lines
 * first appear (host clock: the guest's clock is only set to the second).
 */
class ConsoleWatch {
  readonly marks: ConsoleMarks = {};
  private dir: string | undefined;
  private offset = 0;
  private text = "";
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly sandboxesDir: string,
    private readonly known: Set<string>,
  ) {
    this.timer = setInterval(() => this.poll(), POLL_MS);
  }

  private poll(): void {
    try {
      if (!this.dir) {
        const name = readdirSync(this.sandboxesDir).find((n) => !this.known.has(n));
        if (!name) return;
        this.dir = join(this.sandboxesDir, name);
      }
      const file = join(this.dir, "console.log");
      const size = statSync(file).size;
      if (size <= this.offset) return;
      const buf = Buffer.alloc(size - this.offset);
      const fd = openSync(file, "r");
      try {
        readSync(fd, buf, 0, buf.length, this.offset);
      } finally {
        closeSync(fd);
      }
      this.offset = size;
      this.text += buf.toString("latin1");
      const now = performance.now();
      const m = this.marks;
      if (m.init === undefined && this.text.includes("locale2b-init:")) m.init = now;
      if (m.envdStarted === undefined && this.text.includes("locale2b-init: envd started")) m.envdStarted = now;
      if (m.envdListening === undefined && this.text.includes('"envd listening"')) m.envdListening = now;
    } catch {
      // not there yet
    }
  }

  /** Stops polling (one last look first) and reads the birth times of the sandbox's files. */
  stop(): ConsoleMarks {
    this.poll();
    clearInterval(this.timer);
    if (this.dir) {
      for (const [key, name] of [["disk", "disk.qcow2"], ["console", "console.log"]] as const) {
        try {
          const b = statSync(join(this.dir, name)).birthtimeMs;
          if (b > 0) this.marks[key] = epochToPerf(b);
        } catch {
          // no birth time on this file system
        }
      }
    }
    return this.marks;
  }
}

interface BootSample {
  createMs: number;
  firstMs: number;
  totalMs: number;
  /** Relative to the POST. */
  marks: ConsoleMarks;
}

async function firstStdout(client: Client<typeof Process>): Promise<number> {
  let first: number | undefined;
  let exitCode: number | undefined;
  for await (const res of client.start({ process: READY_CMD, stdin: false })) {
    const e = res.event?.event;
    if (e?.case === "data" && e.value.output.case === "stdout" && first === undefined) first = performance.now();
    else if (e?.case === "end") exitCode = e.value.exitCode;
  }
  if (first === undefined || exitCode !== 0) throw new Error(`echo ready gave no stdout or exited ${exitCode}`);
  return first;
}

export function accelLabel(a: Accel): string {
  return `${a.accel.toUpperCase()}: ${a.reason}`;
}

/** Part 1, and part 5's samples (each VM's memory, read after its first command, before it is deleted). */
export async function benchBoot(imagesDir: string, accel: Accel): Promise<{ results: GoalResult[]; memory: VmMemorySample[] }> {
  const n = envInt("LOCALE2B_BENCH_VM_BOOTS", 3);
  heading(`vm 1/5: guest boot, create -> envd ready -> first output of \`bash -l -c 'echo ready'\` (qemu runtime, ${n} VMs one at a time; ${accelLabel(accel)})`);
  const h = await startInProcessControlPlane(new QemuRuntime({ imagesDir }));
  const samples: BootSample[] = [];
  const memory: VmMemorySample[] = [];
  const sandboxesDir = join(h.dataDir, "sandboxes");
  try {
    console.log(`control plane notes: ${h.cp.notes.join("; ")}`);
    for (let i = 0; i < n; i++) {
      const known = new Set<string>();
      try {
        for (const name of readdirSync(sandboxesDir)) known.add(name);
      } catch {
        // none yet
      }
      const watch = new ConsoleWatch(sandboxesDir, known);
      const t0 = performance.now();
      let marks: ConsoleMarks;
      let sb;
      try {
        sb = await h.createSandbox();
      } finally {
        marks = watch.stop();
      }
      const t1 = performance.now();
      const client = routedProcessClient({ baseUrl: h.url, binary: false, agent: proxyAgent, headers: sb.proxyHeaders });
      const first = await firstStdout(client);
      const rel: ConsoleMarks = {};
      for (const [k, v] of Object.entries(marks) as [keyof ConsoleMarks, number][]) rel[k] = v - t0;
      samples.push({ createMs: t1 - t0, firstMs: first - t1, totalMs: first - t0, marks: rel });
      memory.push(await sampleVmMemory(h, sb, client));
      await h.deleteSandbox(sb.id);
    }
  } finally {
    await h.stop();
  }

  const col = (f: (s: BootSample) => number) => {
    const v = samples.map(f);
    return [fmtMs(median(v)), fmtMs(p95(v))];
  };
  printTable(
    [`one at a time (N=${samples.length})`, "p50", "p95"],
    [
      ["create -> envd ready (POST /v2/sandboxes until its 201: envd answered /health and /init)", ...col((s) => s.createMs)],
      ["envd ready -> first stdout of the command (via the control plane's proxy)", ...col((s) => s.firstMs)],
      ["create -> first stdout", ...col((s) => s.totalMs)],
    ],
  );
  // Where the time goes, from the files the VM writes (only stages every sample has).
  const stages: [string, keyof ConsoleMarks | "created", keyof ConsoleMarks | "post"][] = [
    ["POST -> disk overlay created (server work before the runtime)", "disk", "post"],
    ["disk overlay -> QEMU opens its console (qemu-img, vhost-device-vsock, QEMU start-up)", "console", "disk"],
    ["QEMU console -> first `locale2b-init:` line (firmware-less boot of the guest kernel, init's mounts)", "init", "console"],
    ["first init line -> `envd started`", "envdStarted", "init"],
    ["`envd started` -> `envd listening` on the console (node + envd start-up in the guest)", "envdListening", "envdStarted"],
    ["`envd listening` -> 201 (the server's readiness polling, POST /init, response)", "created", "envdListening"],
  ];
  const at = (s: BootSample, k: keyof ConsoleMarks | "created" | "post") => (k === "post" ? 0 : k === "created" ? s.createMs : s.marks[k]);
  const rows: string[][] = [];
  for (const [name, to, from] of stages) {
    const v = samples.map((s) => {
      const a = at(s, from);
      const b = at(s, to);
      return a === undefined || b === undefined ? undefined : b - a;
    });
    if (v.some((x) => x === undefined)) continue;
    const d = v as number[];
    rows.push([name, fmtMs(median(d)), fmtMs(p95(d))]);
  }
  if (rows.length) {
    console.log("");
    printTable([`where the time goes (host clock: file birth times, console.log polled every ${POLL_MS} ms)`, "p50", "p95"], rows);
  } else {
    console.log("(no breakdown: the console showed none of the init's lines, or this file system has no birth times)");
  }

  const ready = median(samples.map((s) => s.createMs));
  const kvm = accel.accel === "kvm";
  const ok = ready <= GOAL_KVM_BOOT_MS;
  console.log(
    `create -> envd ready p50 ${fmtMs(ready)}: ${fmtRatio(ready / GOAL_KVM_BOOT_MS)} the KVM goal of <= ${GOAL_KVM_BOOT_MS} ms ` +
      `(${kvm ? verdict(ok) : "KVM goal, not applicable under TCG"}).` +
      (kvm ? "" : "\nUnder TCG every guest instruction is emulated (1 vCPU): the boot takes seconds, and these numbers say nothing of KVM's."),
  );
  return {
    memory,
    results: [
      {
        benchmark: "vm",
        metric: `create -> envd ready p50 (${accel.accel.toUpperCase()})`,
        value: fmtMs(ready),
        goal: `<= ${GOAL_KVM_BOOT_MS} ms on KVM`,
        ok: kvm ? ok : true,
        ...(kvm ? {} : { notApplicable: "KVM goal, not applicable under TCG" }),
      },
    ],
  };
}
