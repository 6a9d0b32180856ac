import { execFileSync } from "node:child_process";
import { findTemplateImage } from "../../control-plane/images/layout.js";
import { findRunsc, runscDateOf } from "../../control-plane/runtimes/gvisor/runsc.js";
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

/** The date in the version of the runsc the tests use (runscDateOf), 0 without one. */
export function runscDate(): number {
  const bin = findRunsc();
  return bin ? runscDateOf(execFileSync(bin, ["--version"], { encoding: "utf8" }).split("\n")[0] ?? "") : 0;
}
