// Builds the mock Firecracker (mock-firecracker.ts) into something the runtime
// can execute as its `firecracker` binary: the TypeScript is transpiled (no
// type check; tsc covers that) into node_modules/.cache/locale2b-mock-firecracker/<hash>/
// (inside the repository, so its `ajv` and `yaml` imports resolve), next to
// an executable `firecracker` shell wrapper that execs node on it.
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const HELPERS = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HELPERS, "..", "..");
const SOURCES = ["mock-firecracker.ts", "firecracker-spec.ts"];

let built: string | undefined;

/** The path of an executable that behaves as (a mock of) `firecracker`. */
export function mockFirecrackerBin(): string {
  if (built) return built;
  const texts = SOURCES.map((f) => readFileSync(join(HELPERS, f), "utf8"));
  const hash = createHash("sha256").update(process.execPath).update("wrapper finds its script by $0").update(texts.join("\0")).digest("hex").slice(0, 16);
  const dir = join(ROOT, "node_modules", ".cache", "locale2b-mock-firecracker", hash);
  const bin = join(dir, "firecracker");
  if (!existsSync(bin)) {
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    writeFileSync(join(tmp, "package.json"), '{ "type": "module" }\n');
    SOURCES.forEach((f, i) => {
      const out = ts.transpileModule(texts[i]!, {
        fileName: f,
        compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
      });
      writeFileSync(join(tmp, f.replace(/\.ts$/, ".js")), out.outputText);
    });
    const script = `#!/bin/sh\n# mock Firecracker for locale2b's tests (test/helpers/mock-firecracker.ts)\nexec '${process.execPath}' "$(dirname "$0")/mock-firecracker.js" "$@"\n`;
    writeFileSync(join(tmp, "firecracker"), script);
    chmodSync(join(tmp, "firecracker"), 0o755);
    try {
      renameSync(tmp, dir);
    } catch {
      // another test file built the same hash meanwhile
      rmSync(tmp, { recursive: true, force: true });
    }
  }
  built = bin;
  return bin;
}
