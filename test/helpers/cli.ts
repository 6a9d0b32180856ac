// Runs the built CLI (dist/control-plane/cli/main.js) as child processes.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

// LOCALE2B_REPO: where scripts/k8s/cluster.sh runs these helpers bundled, away from the clone.
const root = process.env.LOCALE2B_REPO || fileURLToPath(new URL("../..", import.meta.url));
export const CLI = join(root, "dist", "control-plane", "cli", "main.js");

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment without anything that would point the CLI elsewhere. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ["E2B_API_KEY", "LOCALE2B_API_KEY", "LOCALE2B_URL", "LOCALE2B_DATA_DIR", "PORT", "E2B_API_URL", "E2B_SANDBOX_URL"]) delete env[k];
  return { ...env, LOCALE2B_LOG_LEVEL: "warn", ...extra };
}

/** Runs the CLI to its end; one that hangs is killed after `limitMs` (code null, stderr says so). */
export function runCli(args: string[], env: Record<string, string> = {}, limitMs = 45_000): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: cleanEnv(env), stdio: ["ignore", "pipe", "pipe"] });
    const timer = setTimeout(() => {
      stderr += `\n[test] 'locale2b ${args.join(" ")}' still running after ${limitMs} ms: killed\n`;
      child.kill("SIGKILL");
    }, limitMs);
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export interface Served {
  child: ChildProcess;
  /** What serve printed on stdout up to the end of its start banner. */
  banner: string;
  url: string;
  stderr(): string;
  /** SIGTERM, then the exit code (or the name of the signal that ended it). */
  stop(): Promise<number | string | null>;
}

/** `locale2b serve --port 0` on a data dir; resolves once the start banner is out. */
export function serve(dataDir: string, args: string[] = [], env: Record<string, string> = {}): Promise<Served> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, "serve", "--port", "0", "--data-dir", dataDir, ...args], {
      env: cleanEnv(env),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    // The exit code, or the signal's name when a signal ended it.
    const exited = new Promise<number | string | null>((r) => child.on("exit", (code, signal) => r(code ?? signal)));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      if (!out.includes("Stop with Ctrl-C")) return;
      const url = /E2B_API_URL=(\S+)/.exec(out)?.[1];
      if (!url) return reject(new Error(`no E2B_API_URL in:\n${out}`));
      resolve({
        child,
        banner: out,
        url,
        stderr: () => err,
          stop: () => {
          child.kill("SIGTERM");
          return exited.then((code) => (code === 0 ? 0 : `${code}; stderr:\n${err}`));
        },
      });
    });
    void exited.then((code) => reject(new Error(`serve exited (${code}) before it started:\n${out}\n${err}`)));
  });
}

/** A long-running CLI command (`node`, `api`, ...) started; resolves once its stdout matches `ready`, with the match. */
export function startCli(args: string[], env: Record<string, string>, ready: RegExp): Promise<Served & { match: RegExpExecArray }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: cleanEnv(env), stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    let done = false;
    const exited = new Promise<number | string | null>((r) => child.on("exit", (code, signal) => r(code ?? signal)));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (err = (err + d).slice(-200_000)));
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      const match = done ? null : ready.exec(out);
      if (!match) return;
      done = true;
      resolve({
        child,
        banner: out,
        url: match[1] ?? "",
        match,
        stderr: () => err,
        stop: () => {
          child.kill("SIGTERM");
          return exited.then((code) => (code === 0 ? 0 : `${code}; stderr:\n${err}`));
        },
      });
    });
    void exited.then((code) => {
      if (!done) reject(new Error(`'locale2b ${args.join(" ")}' exited (${code}) before it started:\n${out}\n${err}`));
    });
  });
}
