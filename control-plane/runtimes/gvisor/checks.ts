// What the gvisor runtime needs on a host (`locale2b doctor`): runsc, and
// the platform its sandboxes run on (systrap, ptrace, kvm).
import { binaryCheck, type HostCheck } from "../../host/checks.js";
import { findExecutable } from "../../host/executables.js";
import { setting } from "../../settings.js";
import { oldRunscNote, RUNSC_INSTALL, runscVersion } from "./runsc.js";

async function runscCheck(env: NodeJS.ProcessEnv): Promise<HostCheck> {
  const check = await binaryCheck("runsc", setting("LOCALE2B_RUNSC", env), "LOCALE2B_RUNSC", "gvisor", ["--version"], `optional (gvisor runtime only): ${RUNSC_INSTALL}`, (l) =>
    l.replace(/^runsc version /, "runsc "),
  );
  if (!check.ok) return check;
  const path = findExecutable("runsc", setting("LOCALE2B_RUNSC", env), env)!;
  const v = await runscVersion(path).catch(() => undefined);
  const old = v && oldRunscNote(v.version);
  return { ...check, detail: v ? `${check.detail}, platform ${v.platform}${old ? `; ${old}` : ""}` : check.detail };
}

export function gvisorChecks(env: NodeJS.ProcessEnv): Promise<HostCheck>[] {
  return [runscCheck(env)];
}

/** doctor's line for the gvisor runtime. */
export function gvisorSummary(checks: HostCheck[]): string {
  const runsc = checks.find((c) => c.name === "runsc");
  return runsc?.ok ? `gvisor runtime: ${runsc.detail}` : "gvisor runtime: runsc is not installed (scripts/setup-host installs it)";
}
