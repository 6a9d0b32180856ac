import { homedir, loadavg } from "node:os";
import { join } from "node:path";
import { findKernel, findTemplateImage, imagesDir } from "../../control-plane/images/layout.js";
import { ProcessRuntime } from "../../control-plane/runtimes/process/process-runtime.js";
import { QemuRuntime } from "../../control-plane/runtimes/qemu/qemu-runtime.js";
import type { GoalResult } from "../lib/goal.js";
import { processTable } from "../lib/procmem.js";
import { accelLabel, benchBoot, type Accel } from "./boot.js";
import { startPair, type RuntimeSide } from "./cp.js";
import { benchVmExec } from "./exec.js";
import { reportVmMemory, type VmMemorySample } from "./memory.js";
import { benchVmStream } from "./stream.js";
import { benchTemplate } from "./template.js";

/**
 * The image cache: $LOCALE2B_IMAGES_DIR, else the CLI's default (<data dir>/images), else the tests' default
 * (~/.cache/locale2b/images) when only that one has a kernel and the base template.
 */
function vmImagesDir(): string {
  const first = imagesDir();
  if (process.env.LOCALE2B_IMAGES_DIR) return first;
  const ready = (d: string) => findKernel({ ...process.env, LOCALE2B_IMAGES_DIR: d }, d) !== undefined && findTemplateImage("base", d) !== undefined;
  const tests = join(homedir(), ".cache", "locale2b", "images");
  return !ready(first) && ready(tests) ? tests : first;
}

/** The load average, and how many QEMU processes run on this host now (another user's VMs skew a 2-core machine). */
function hostLoad(): string {
  const qemus = [...processTable().values()].filter((p) => /(^|\/)qemu-system-\S+ /.test(p.cmdline)).length;
  return `load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}, ${qemus} QEMU process(es) running`;
}

/**
 * `npm run bench -- vm`: the qemu runtime's microVMs: guest boot to envd
 * ready, exec and stream over hybrid vsock against the process runtime on the
 * same template rootfs, template build times, host memory per VM. Control
 * planes run in this process (startControlPlane with the runtime); every VM
 * is killed at the end, also on an error or Ctrl-C.
 */
export async function benchVm(): Promise<GoalResult[]> {
  const dir = vmImagesDir();
  const qemu = new QemuRuntime({ imagesDir: dir });
  const tools = await qemu.resolveTools(); // says what to install when QEMU, vhost-device-vsock or the kernel is missing
  const image = findTemplateImage("base", dir);
  if (!image) throw new Error(`template 'base' is not built in ${dir}: run \`node dist/control-plane/cli/main.js template build base\``);
  const accel: Accel = { accel: tools.accel, reason: tools.accelReason };
  console.log(
    `\nnote: the vm benchmarks boot QEMU -M microvm guests under ${accelLabel(accel)}.\n` +
      `kernel ${tools.kernel}; template ${image.name}-${image.hash} (${dir}); ${hostLoad()}.`,
  );

  const only = (process.env.LOCALE2B_BENCH_VM_PARTS ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  const want = (i: number) => !only.length || only.includes(String(i));
  const results: GoalResult[] = [];
  let memory: VmMemorySample[] | undefined;
  let failures = 0;
  let ran = 0;
  const part = async (i: number, name: string, fn: () => Promise<GoalResult[]>) => {
    if (!want(i)) return;
    ran++;
    try {
      results.push(...(await fn()));
    } catch (err) {
      failures++;
      console.log(`\nvm: ${name}: FAILED, no numbers: ${err instanceof Error ? err.message : String(err)}`);
      if (process.env.LOCALE2B_BENCH_DEBUG && err instanceof Error) console.log(err.stack);
      results.push({ benchmark: "vm", metric: name, value: "could not run", goal: "-", ok: false });
    }
  };

  await part(1, "guest boot -> envd ready", async () => {
    const r = await benchBoot(dir, accel);
    memory = r.memory;
    return r.results;
  });

  // Parts 2 and 3 share one VM and one process sandbox.
  let pair: { vm: RuntimeSide; proc: RuntimeSide; stop(): Promise<void> } | undefined;
  let pairError: unknown;
  const withPair = async <T>(fn: (p: { vm: RuntimeSide; proc: RuntimeSide }) => Promise<T>): Promise<T> => {
    if (pairError) throw pairError;
    try {
      pair ??= await startPair(new QemuRuntime({ imagesDir: dir }), new ProcessRuntime({ imagesDir: dir }), accel.accel.toUpperCase());
    } catch (err) {
      pairError = err;
      throw err;
    }
    return fn(pair);
  };
  try {
    await part(2, "exec over hybrid vsock vs process runtime", () => withPair(benchVmExec));
    await part(3, "stream over hybrid vsock vs process runtime", () => withPair(benchVmStream));
  } finally {
    await pair?.stop();
  }

  await part(4, "template build time", () => benchTemplate(dir));
  if (want(5)) {
    if (memory) results.push(...reportVmMemory(memory, accelLabel(accel)));
    else console.log("\nvm 5/5: host memory per VM: measured on part 1's VMs, and part 1 did not run (LOCALE2B_BENCH_VM_PARTS)");
  }
  console.log(`\nvm: at the end: ${hostLoad()} (this benchmark's are gone by now)`);
  if (ran > 0 && failures === ran) throw new Error("no part of the vm benchmark could run");
  return results;
}
