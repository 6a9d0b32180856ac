// Runs locale2b's Code Interpreter server (rootfs/code-interpreter) on the host
// for the tests, in the venv scripts/setup-code-interpreter-venv.sh builds
// (cached by the hash of its requirements.txt). Inside a sandbox the same
// server runs as the template's start command (docs/code-interpreter.md).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
export const SERVER_DIR = join(root, "rootfs", "code-interpreter");

/**
 * The venv's python, or why there is none (the suites skip with that reason).
 * Builds the venv when missing (~1 min from PyPI; .ci/run builds it ahead).
 */
export function codeInterpreterPython(): { python: string } | { skip: string } {
  const r = spawnSync("bash", [join(root, "scripts", "setup-code-interpreter-venv.sh")], {
    encoding: "utf8",
    timeout: 10 * 60_000,
  });
  if (r.status !== 0) {
    const why = (r.stderr || r.error?.message || `exit ${r.status}`).trim().split("\n").slice(-2).join(" ");
    return { skip: `no Python venv for the Code Interpreter server (python3 >= 3.11 and PyPI needed): ${why}` };
  }
  const venv = r.stdout.trim().split("\n").at(-1)!;
  return { python: join(venv, "bin", "python") };
}

export interface CiServer {
  url: string;
  /** The directory contexts start in (a temporary one, removed by stop()). */
  cwd: string;
  child: ChildProcess;
  /** The server's log so far (JSON lines). */
  log(): string;
  /** SIGTERM, then the exit code (the server shuts its kernels down first). */
  stop(): Promise<number | string | null>;
}

/** Starts the server on a free port of 127.0.0.1; resolves once GET /health says its default contexts run. */
export async function startCodeInterpreter(python: string): Promise<CiServer> {
  const dir = mkdtempSync(join(tmpdir(), "locale2b-ci-test-"));
  const cwd = join(dir, "work");
  mkdirSync(cwd);
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith("E2B_") || k.startsWith("JPY_")) delete env[k];
  const child = spawn(python, ["-m", "locale2b_ci", "--host", "127.0.0.1", "--port", "0", "--cwd", cwd, "--node", process.execPath], {
    cwd: SERVER_DIR,
    env: { ...env, HOME: dir, LOCALE2B_CI_LOG_LEVEL: "info" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  child.stderr!.setEncoding("utf8").on("data", (d: string) => (log += d));
  const exited = new Promise<number | string | null>((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    const code = await exited;
    clearTimeout(timer);
    rmSync(dir, { recursive: true, force: true });
    return code;
  };
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const onData = () => {
        const m = log.match(/"msg": "listening".*"port": (\d+)/);
        if (m) resolve(Number(m[1]));
      };
      child.stderr!.on("data", onData);
      child.on("exit", (code) => reject(new Error(`the Code Interpreter server exited (${code}) before it listened:\n${log}`)));
    });
    const url = `http://127.0.0.1:${port}`;
    for (let i = 0; ; i++) {
      const res = await fetch(`${url}/health`).catch(() => undefined);
      if (res?.status === 200) break;
      if (i > 600) throw new Error(`GET ${url}/health did not answer 200 within 60 s:\n${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    return { url, cwd, child, log: () => log, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Whether a process id is alive (signal 0). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** /proc's view of a process, for a failure message. */
export function procState(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/status`, "utf8").split("\n").filter((l) => /^(Name|State|PPid):/.test(l)).join(", ");
  } catch {
    return "gone";
  }
}
