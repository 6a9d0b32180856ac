// What the firecracker runtime needs on a host (`locale2b doctor`): a
// firecracker binary, and hardware KVM to run it.
import type { Accel } from "../../host/accel.js";
import { binaryCheck, type HostCheck } from "../../host/checks.js";
import { setting } from "../../settings.js";

async function firecrackerCheck(env: NodeJS.ProcessEnv, accel: Promise<Accel>): Promise<HostCheck> {
  const fix = "optional (firecracker runtime only, needs hardware KVM): put a firecracker binary on PATH or set LOCALE2B_FIRECRACKER";
  const check = await binaryCheck("firecracker", setting("LOCALE2B_FIRECRACKER", env), "LOCALE2B_FIRECRACKER", "firecracker", ["--version"], fix);
  if (!check.ok) return check;
  const a = await accel;
  if (a.accel !== "kvm") return { ...check, ok: false, detail: `${check.detail}, but it needs hardware KVM: ${a.reason}`, fix: "run the firecracker runtime on a host with vmx/svm" };
  return check;
}

export function firecrackerChecks(env: NodeJS.ProcessEnv, accel: Promise<Accel>): Promise<HostCheck>[] {
  return [firecrackerCheck(env, accel)];
}

/** doctor's line for the firecracker runtime. */
export function firecrackerSummary(checks: HostCheck[]): string {
  const fc = checks.find((c) => c.name === "firecracker");
  return fc?.ok ? `firecracker runtime: ${fc.detail}` : `firecracker runtime: not available (${fc?.detail ?? "not checked"})`;
}
