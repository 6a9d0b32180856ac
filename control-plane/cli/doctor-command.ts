// `locale2b doctor`: what this host has for each runtime, as a table (or
// JSON); exit 1 when something the runtime asked about (--runtime, default
// DOCTOR_RUNTIME: the one with the most to install) needs is missing.
import { accelFor } from "../host/accel.js";
import { imageChecks, imageToolChecks, runtimeReady, type HostCheck } from "../host/checks.js";
import { imagesDir } from "../images/layout.js";
import { DOCTOR_RUNTIME, RUNTIMES, runtimeNames } from "../runtimes/registry.js";
import { parse, UsageError } from "./args.js";

function help(): string {
  const needs = RUNTIMES.filter((r) => r.doctorHelp).map((r) => `  ${r.name}: ${r.doctorHelp}`);
  const env = ["LOCALE2B_IMAGES_DIR", "LOCALE2B_DATA_DIR", "LOCALE2B_KERNEL", ...RUNTIMES.flatMap((r) => r.doctorSettings)];
  return `Usage: locale2b doctor [--runtime NAME] [--json]

Checks what each runtime needs on this host (${runtimeNames().join(", ")}):
${needs.join("\n")}
and the image tools (debootstrap, mkfs.ext4, gcc with a static libc), and whether
the guest kernel and the 'base' template are built. scripts/setup-host installs
the tools.

Exit status: 0 when the runtime NAME (default ${DOCTOR_RUNTIME}) has everything it needs
(a kernel and a template can still be missing), 1 otherwise.

Options:
  --runtime NAME  the runtime whose readiness sets the exit status (default ${DOCTOR_RUNTIME})
  --json          print the checks as JSON
  -h, --help      show this help

Environment: ${env.join(", ")}.
`;
}

/** Every check, run concurrently, in a fixed order: each runtime's own, then the image tools and images. */
export async function hostChecks(env: NodeJS.ProcessEnv = process.env): Promise<HostCheck[]> {
  const accel = accelFor();
  const byRuntime = RUNTIMES.flatMap((r) => r.checks(env, accel));
  return Promise.all([...byRuntime, ...imageToolChecks(), ...imageChecks(env, imagesDir(env))]);
}

/** ok, or how much a failed check matters to the runtime asked about. */
export function statusOf(c: HostCheck, runtime = DOCTOR_RUNTIME): string {
  if (c.ok) return "ok";
  if (c.required === runtime) return "MISSING";
  if (c.required === "images") return "todo";
  return "n/a";
}

/** The checks as an aligned table: status, check, detail, fix. */
export function formatChecks(checks: HostCheck[], runtime = DOCTOR_RUNTIME): string {
  const rows = [["STATUS", "CHECK", "DETAIL", "FIX"], ...checks.map((c) => [statusOf(c, runtime), c.name, c.detail, c.fix && !c.ok ? c.fix : ""])];
  const widths = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => (i < 3 ? cell.padEnd(widths[i]!) : cell)).join("  ").trimEnd()).join("\n") + "\n";
}

function summary(checks: HostCheck[]): string {
  return [`images: ${imagesDir()}`, ...RUNTIMES.map((r) => r.summary(checks))].join("\n") + "\n";
}

export async function runDoctorCommand(args: string[]): Promise<number> {
  const { values } = parse("doctor", {
    args,
    options: { json: { type: "boolean" }, runtime: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  if (values.help) {
    process.stdout.write(help());
    return 0;
  }
  const runtime = values.runtime ?? DOCTOR_RUNTIME;
  if (!runtimeNames().includes(runtime)) throw new UsageError(`unknown runtime '${runtime}' (known: ${runtimeNames().join(", ")})`, "doctor");
  const checks = await hostChecks();
  const ok = runtimeReady(checks, runtime);
  if (values.json) process.stdout.write(JSON.stringify({ ok, runtime, imagesDir: imagesDir(), checks }, null, 2) + "\n");
  else process.stdout.write(formatChecks(checks, runtime) + "\n" + summary(checks));
  return ok ? 0 : 1;
}
