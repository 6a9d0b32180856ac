// One table for every LOCALE2B_* variable (control-plane/settings.ts): the
// control plane reads them only through it, and docs/configuration.md and
// `serve --help` list each of them.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { setting, SETTINGS, settingsHelp } from "../../control-plane/settings.js";

const ROOT = join(import.meta.dirname, "..", "..");

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return sources(p);
    return p.endsWith(".ts") ? [p] : [];
  });
}

const files = [...sources(join(ROOT, "control-plane")), ...sources(join(ROOT, "envd"))];

describe("settings (LOCALE2B_* variables)", () => {
  it("every variable the code names is in the table", () => {
    const named = new Set<string>();
    for (const f of files) for (const m of readFileSync(f, "utf8").matchAll(/LOCALE2B_[A-Z0-9_]*[A-Z0-9]/g)) named.add(m[0]);
    const unknown = [...named].filter((n) => !(n in SETTINGS));
    expect(unknown).toEqual([]);
  });

  it("the control plane reads them through setting() only (envd, shipped alone, reads its own)", () => {
    const direct = files
      .filter((f) => !f.endsWith("settings.ts") && !relative(ROOT, f).startsWith("envd/"))
      .flatMap((f) => [...readFileSync(f, "utf8").matchAll(/\benv(?:\[["']|\.)LOCALE2B_\w+/g)].map((m) => `${relative(ROOT, f)}: ${m[0]}`));
    expect(direct).toEqual([]);
  });

  it("docs/configuration.md and serve --help list each one", () => {
    const doc = readFileSync(join(ROOT, "docs", "configuration.md"), "utf8");
    const help = settingsHelp();
    for (const name of Object.keys(SETTINGS)) {
      expect(doc, name).toContain(`\`${name}\``);
      expect(help, name).toContain(name);
    }
  });

  it("an empty or blank value counts as unset", () => {
    expect(setting("LOCALE2B_RUNTIME", { LOCALE2B_RUNTIME: "" })).toBeUndefined();
    expect(setting("LOCALE2B_RUNTIME", { LOCALE2B_RUNTIME: "  " })).toBeUndefined();
    expect(setting("LOCALE2B_RUNTIME", { LOCALE2B_RUNTIME: "gvisor" })).toBe("gvisor");
  });
});
