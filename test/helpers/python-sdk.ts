// The venv of the Python e2b SDK suite (test/python), for tests that run pytest themselves.
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
export const PYTHON_TESTS = join(root, "test", "python");

/** The venv's python, keyed by requirements.txt exactly as scripts/setup-python-tests.sh and scripts/test.mjs name it. */
export function pythonSdkPython(): string {
  const venv =
    process.env.LOCALE2B_PYTHON_VENV ||
    join(homedir(), ".cache", "locale2b", `venv-${createHash("sha256").update(readFileSync(join(PYTHON_TESTS, "requirements.txt"))).digest("hex").slice(0, 16)}`);
  return join(venv, "bin", "python");
}

/** Why the Python SDK suite cannot run here, or undefined. */
export function pythonSdkMissing(): string | undefined {
  const python = pythonSdkPython();
  return existsSync(python) ? undefined : `no venv for the Python e2b SDK (${python}): run 'bash scripts/setup-python-tests.sh'`;
}
