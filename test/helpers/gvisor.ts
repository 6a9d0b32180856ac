import { execFileSync } from "node:child_process";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { findRunsc } from "../../control-plane/runtimes/gvisor/runsc.js";
import { GvisorRuntime } from "../../control-plane/runtimes/gvisor/gvisor-runtime.js";
import { testImagesDir } from "./vm.js";

/** Why the gvisor suites cannot run here, or undefined when they can. */
export function gvisorMissing(dir = testImagesDir()): string | undefined {
  const missing: string[] = [];
  if (!findRunsc()) missing.push("runsc (scripts/setup-host installs it)");
  if (process.getuid?.() !== 0) missing.push("root");
  if (!findTemplateImage("base", dir)) missing.push(`the base template in ${dir} (locale2b template build base)`);
  return missing.length ? `the gvisor suites need ${missing.join(", ")}` : undefined;
}

export function gvisorRuntime(): GvisorRuntime {
  return new GvisorRuntime({ imagesDir: testImagesDir() });
}

/**
 * The date in runsc's version (Debian's 0.0~20240729.0 → 20240729; gVisor's release-20250101.0; the build of
 * scripts/build-runsc.sh 0.0~20260905.0-go), 0 when it has none or there is no runsc.
 */
export function runscDate(): number {
  const bin = findRunsc();
  if (!bin) return 0;
  const first = execFileSync(bin, ["--version"], { encoding: "utf8" }).split("\n")[0] ?? "";
  return Number(/20\d{6}/.exec(first)?.[0] ?? 0);
}

/** From this runsc on (scripts/build-runsc.sh's), a burst over a sandbox's memory leaves the sandbox alive (docs/runtimes.md). */
export const RUNSC_CONTAINS_BURSTS = 20260905;
