import { accessSync, constants, existsSync, statSync } from "node:fs";
import { getSystemErrorMap } from "node:util";
import type { SpawnSpec } from "./process-handle.js";

/**
 * A command that cannot be executed (missing, not executable, not a
 * program). E2B's envd runs every command through a `/bin/sh` wrapper
 * (`… exec nice "$@"`), so such a command still starts: it prints
 * `nice: '<cmd>': No such file or directory` on stderr and exits 127 (126
 * when it exists but cannot run). envd answers the same way, with a real
 * process that reports it (`reporter`).
 */
export interface ExecFailure {
  /** The stderr line, e.g. `envd: '/x': No such file or directory`. */
  line: string;
  /** 127 when the command is not there, 126 when it cannot be run (as `nice` and the shells exit). */
  exitCode: number;
}

/** errno codes of execve that mean "this command cannot be run" rather than "envd cannot spawn". */
const EXEC_ERRORS = new Set(["ENOENT", "EACCES", "ENOEXEC", "ENOTDIR", "ELOOP", "ENAMETOOLONG", "EISDIR", "ETXTBSY", "E2BIG"]);

/** The shell that reports the failure: it is on every sandbox's root filesystem. */
const SHELL = "/bin/sh";

/** The C library's wording of an errno (`No such file or directory`), from libuv's. */
function reason(code: string): string {
  for (const [name, text] of getSystemErrorMap().values()) {
    if (name === code) return text.charAt(0).toUpperCase() + text.slice(1);
  }
  return code;
}

export function execFailure(cmd: string, code: string | undefined): ExecFailure | undefined {
  if (code === undefined || !EXEC_ERRORS.has(code)) return undefined;
  return { line: `envd: '${cmd}': ${reason(code)}`, exitCode: code === "ENOENT" ? 127 : 126 };
}

/** The failure of a spawn error (`error` event of a child process), if it is an exec failure. */
export function execFailureOf(cmd: string, err: unknown): ExecFailure | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return execFailure(cmd, typeof code === "string" ? code : undefined);
}

/**
 * Why `cmd` could not be executed, found before spawning (as execvp would
 * search PATH), or undefined when it looks runnable. For PTYs, whose
 * library reports an exec failure only as output and exit status 1.
 */
export function precheckExec(cmd: string, path: string | undefined): ExecFailure | undefined {
  const candidates = cmd.includes("/") ? [cmd] : (path ?? "").split(":").map((dir) => `${dir || "."}/${cmd}`);
  let failure: string = "ENOENT";
  for (const file of candidates) {
    try {
      if (statSync(file).isDirectory()) {
        failure = "EACCES";
        continue;
      }
      accessSync(file, constants.X_OK);
      return undefined;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // As execvp: a missing candidate is skipped, a found but unusable one is remembered.
      if (code !== "ENOENT" && code !== "ENOTDIR") failure = code ?? failure;
      else if (cmd.includes("/")) failure = code;
    }
  }
  return execFailure(cmd, failure);
}

/**
 * Why `failure` cannot be reported by a process as E2B's envd does: the
 * sandbox's image has no /bin/sh (a distroless or `FROM scratch` image).
 * Undefined when it has one.
 */
export function unreportable(cmd: string, failure: ExecFailure): string | undefined {
  if (existsSync(SHELL)) return undefined;
  const what = failure.line.replace(/^envd: /, "");
  return cmd === SHELL ? `${what}: this sandbox's image has no shell` : `${what}, and there is no ${SHELL} either: this sandbox's image has no shell`;
}

/** What to spawn instead of `spec`: a shell that prints the failure on stderr and exits with its code. */
export function reporter(spec: SpawnSpec, failure: ExecFailure): SpawnSpec {
  return {
    ...spec,
    cmd: SHELL,
    args: ["-c", 'printf "%s\\n" "$1" >&2; exit "$2"', "envd", failure.line, String(failure.exitCode)],
  };
}
