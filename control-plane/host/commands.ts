// Short host commands the server runs while sandboxes start, end, pause and
// fork (ip, nft, nsenter, mkfs.ext4, cp, sync): started by a spawn helper (`locale2b-init
// --spawn-helper`, as envd starts its processes) when a runtime has offered
// one, else by Node. Node's spawn forks the whole server and waits for the
// child's exec: about 1-2 ms with the event loop stopped, a dozen times per
// sandbox started and deleted, in the middle of other sandboxes' requests.
// The helper is a small process that starts each child with
// clone(CLONE_VM | CLONE_VFORK); asking it is one write.
import { execFile } from "node:child_process";
import { SpawnHelper, type SpawnedChild } from "../../envd/process/handler/spawn-helper.js";

export interface CommandOutput {
  stdout: string;
  stderr: string;
}

/** What a failed command throws: execFile's error shape (callers read `stderr`). */
export interface CommandError extends Error, Partial<CommandOutput> {
  code?: number | string;
  signal?: NodeJS.Signals | null;
}

export interface RunOptions {
  /** Written to the command's stdin, which is then closed (else stdin is /dev/null). */
  input?: string;
}

/** Output kept per stream; a command that writes more is killed and fails (execFile's maxBuffer). */
const MAX_OUTPUT = 4 * 1024 * 1024;

/** A helper that keeps dying is given up for Node's spawn. */
const MAX_HELPER_STARTS = 5;

let offered: string | undefined;
let helper: Promise<SpawnHelper | undefined> | undefined;
let deaths = 0;

/**
 * Offers `binary` (a `locale2b-init`) as the spawn helper for host commands;
 * the first offer is taken. It is started at the first command after this.
 */
export function offerSpawnHelper(binary: string): void {
  offered ??= binary;
}

async function startHelper(binary: string): Promise<SpawnHelper | undefined> {
  const h = new SpawnHelper(binary);
  try {
    await h.ready;
    return h;
  } catch {
    // Not usable here (its probe failed): Node's spawn, as before.
    h.proc.kill("SIGKILL");
    return undefined;
  }
}

async function currentHelper(): Promise<SpawnHelper | undefined> {
  if (!offered) return undefined;
  const started = (helper ??= startHelper(offered));
  const h = await started;
  if (h?.dead) {
    // It died (killed from outside): the next command gets a new one, up to MAX_HELPER_STARTS; this one Node's spawn.
    if (helper === started && ++deaths < MAX_HELPER_STARTS) helper = startHelper(offered);
    else if (helper === started) helper = Promise.resolve(undefined);
    return undefined;
  }
  return h?.broken ? undefined : h;
}

function failure(file: string, args: string[], out: CommandOutput, code: number | null, signal: NodeJS.Signals | null, why?: string): CommandError {
  const err: CommandError = new Error(`Command failed: ${[file, ...args].join(" ")}\n${why ?? out.stderr}`);
  err.code = code ?? undefined;
  err.signal = signal;
  err.stdout = out.stdout;
  err.stderr = out.stderr;
  return err;
}

function collect(child: SpawnedChild, file: string, args: string[], input: string | undefined): Promise<CommandOutput> {
  return new Promise((resolve, reject) => {
    // The helper's reports (this child's exit among them) do not keep the server's event loop alive; the wait for them must.
    const hold = setInterval(() => undefined, 1 << 30);
    const parts = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
    const sizes = { stdout: 0, stderr: 0 };
    let tooMuch: string | undefined;
    for (const name of ["stdout", "stderr"] as const) {
      child.output[name].attach((data, release) => {
        if (!tooMuch && sizes[name] + data.length > MAX_OUTPUT) {
          tooMuch = `its ${name} exceeded ${MAX_OUTPUT} bytes`;
          try {
            process.kill(child.pid, "SIGKILL");
          } catch {
            // already gone
          }
        } else if (!tooMuch) {
          parts[name].push(Buffer.from(data));
          sizes[name] += data.length;
        }
        release?.();
        return true;
      });
    }
    if (child.stdin) {
      child.stdin.on("error", () => undefined); // EPIPE: the command did not read it all; its exit status tells
      child.stdin.end(input ?? "");
    }
    child.once("close", (code: number | null, signal: NodeJS.Signals | null) => {
      clearInterval(hold);
      const out = { stdout: Buffer.concat(parts.stdout).toString("utf8"), stderr: Buffer.concat(parts.stderr).toString("utf8") };
      if (code === 0 && !tooMuch) resolve(out);
      else reject(failure(file, args, out, code, signal, tooMuch));
    });
  });
}

function runWithNode(file: string, args: string[], o: RunOptions): Promise<CommandOutput> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { encoding: "utf8", maxBuffer: MAX_OUTPUT }, (err, stdout, stderr) => {
      if (!err) return resolve({ stdout, stderr });
      reject(Object.assign(err, { stdout, stderr }));
    });
    child.stdin?.on("error", () => undefined);
    child.stdin?.end(o.input ?? "");
  });
}

/**
 * Runs `file` (an absolute path) with `args` and resolves with its output
 * when it exits 0; else rejects with execFile's error shape (`code`,
 * `stderr`). The server's environment and `/` as the working directory.
 */
export async function runCommand(file: string, args: string[], o: RunOptions = {}): Promise<CommandOutput> {
  const h = await currentHelper();
  if (!h) return runWithNode(file, args, o);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
  let child: SpawnedChild;
  try {
    child = await h.spawn({ cmd: file, args, env, cwd: "/", stdin: o.input !== undefined, oom: false });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    // The program itself cannot be started (ENOENT, EACCES): as execFile says it.
    if (e.syscall === "spawn") throw Object.assign(new Error(`spawn ${file} ${e.code}`), { code: e.code, errno: e.errno, syscall: `spawn ${file}`, path: file, stdout: "", stderr: "" });
    // The helper failed (it died, or its pipes cannot be opened here): Node's spawn.
    return runWithNode(file, args, o);
  }
  return collect(child, file, args, o.input);
}

/** Tests: forget the offered helper (the next offer is taken). */
export function resetHostCommands(): void {
  void helper?.then((h) => h?.proc.stdin?.end());
  helper = undefined;
  offered = undefined;
  deaths = 0;
}
