// The runsc command line: one sandbox's state lives under its own --root (in
// the sandbox's directory), so a sandbox's files, its runsc state and, later,
// its checkpoint images are one folder, and adoption after a restart needs
// nothing but that folder.
import { execFile, spawn } from "node:child_process";
import { closeSync, openSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { findExecutable } from "../../host/executables.js";
import { setting } from "../../settings.js";

const exec = promisify(execFile);

/** runsc: LOCALE2B_RUNSC, else on PATH (or where scripts/setup-host installs it). */
export function findRunsc(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return findExecutable("runsc", setting("LOCALE2B_RUNSC", env), env);
}

export const RUNSC_INSTALL =
  "install gVisor's runsc: run scripts/setup-host (Debian trixie's static build into /usr/local/bin), or put gVisor's release on PATH (https://gvisor.dev/docs/user_guide/install/), or set LOCALE2B_RUNSC";

/** From this runsc on (gVisor's tree of 2026-09-05, as scripts/build-runsc.sh builds it), a burst over a sandbox's memory leaves the sandbox alive. */
export const RUNSC_CONTAINS_BURSTS = 20260905;

/** The date in a runsc version (Debian's 0.0~20240729.0, gVisor's release-20250101.0, ours 0.0~20260905.0-go); 0 when it has none. */
export function runscDateOf(version: string): number {
  return Number(/20\d{6}/.exec(version)?.[0] ?? 0);
}

/** What an older runsc costs, for doctor and the server's start-up notes; undefined for a recent one. */
export function oldRunscNote(version: string): string | undefined {
  if (runscDateOf(version) >= RUNSC_CONTAINS_BURSTS) return undefined;
  return "this runsc predates 2026-09-05: a burst of processes over a sandbox's memory can end the whole sandbox, and resumes are about 3x slower (scripts/setup-host builds a newer one when Go is installed)";
}

/** Options a runsc may lack (Debian's 20240729 has neither), found from its `--help`, once per binary. */
export interface RunscFeatures {
  /** `restore -background`: the restore returns once the sandbox runs; its memory is read in behind it. */
  backgroundRestore: boolean;
  /** `checkpoint -exclude-committed-zero-pages`: pages of zeros are not written to the image. */
  skipZeroPages: boolean;
}
const featureCache = new Map<string, Promise<RunscFeatures>>();

/** `runsc <command> --help`: its flags, on stderr, with a non-zero exit ("help requested"). */
function helpOf(bin: string, command: string): Promise<string> {
  return new Promise((resolve) => execFile(bin, [command, "--help"], { timeout: 20_000 }, (_err, stdout, stderr) => resolve(`${stdout}${stderr}`)));
}

/** Once per binary, asked without blocking (the runtime's check() asks first, so a sandbox start finds it known). */
export function runscFeatures(bin: string): Promise<RunscFeatures> {
  let f = featureCache.get(bin);
  if (!f) {
    f = Promise.all([helpOf(bin, "restore"), helpOf(bin, "checkpoint")]).then(([restore, checkpoint]) => ({
      backgroundRestore: /^\s*-background\b/m.test(restore),
      skipZeroPages: /^\s*-exclude-committed-zero-pages\b/m.test(checkpoint),
    }));
    featureCache.set(bin, f);
  }
  return f;
}

/** The platform sandboxes run on: LOCALE2B_RUNSC_PLATFORM, else runsc's default (systrap; ptrace before 2023). */
export function runscPlatform(env: NodeJS.ProcessEnv = process.env): string | undefined {
  return setting("LOCALE2B_RUNSC_PLATFORM", env) || undefined;
}

/** `runsc --version`'s first line ("runsc version 0.0~20240729.0"), and its default platform. */
export async function runscVersion(bin: string): Promise<{ version: string; platform: string }> {
  const { stdout } = await exec(bin, ["--version"], { timeout: 20_000 });
  const version = stdout.split("\n")[0]!.replace(/^runsc version\s*/, "").trim();
  let platform = runscPlatform() ?? "";
  if (!platform) {
    // `runsc flags` lists the flags with their defaults: "... (default \"systrap\")".
    const text = await exec(bin, ["flags"], { timeout: 20_000 }).then(
      (r) => `${r.stdout}${r.stderr}`,
      (e: { stdout?: string; stderr?: string }) => `${e.stdout ?? ""}${e.stderr ?? ""}`,
    );
    const m = /-platform string\s*\n[^\n]*\(default "([^"]+)"\)/.exec(text);
    platform = m?.[1] ?? "unknown";
  }
  return { version, platform };
}

export interface RunscState {
  status: "created" | "running" | "paused" | "stopped" | string;
  /** The sandbox (sentry) process on the host. */
  pid: number;
}

export interface RunOptions {
  bundle: string;
  /** `sandbox` (a netstack on the devices of the bundle's network namespace) or `none` (loopback only). */
  network: "sandbox" | "none";
  /** The file the sandbox's stdout and stderr (its init's, envd's) and runsc's own errors go to. */
  logFile: string;
}

/** runsc with one sandbox's state root; the container id is the sandbox id. */
export class Runsc {
  /** Where the last run or restore had runsc write the sandbox's pid. */
  private pidFile: string | undefined;

  constructor(
    readonly bin: string,
    readonly root: string,
    readonly id: string,
  ) {}

  private globals(): string[] {
    const platform = runscPlatform();
    // runsc writes a file per command (run, restore, checkpoint, boot, gofer) in the folder.
    const debugDir = setting("LOCALE2B_RUNSC_DEBUG_LOG");
    const debug = debugDir ? ["--debug", `--debug-log=${join(debugDir, this.id)}/`] : [];
    return ["--root", this.root, ...(platform ? [`--platform=${platform}`] : []), ...debug];
  }

  /** Runs a short runsc command; its error says runsc's own words. */
  async cmd(args: string[], timeoutMs = 60_000): Promise<string> {
    try {
      const { stdout } = await exec(this.bin, [...this.globals(), ...args], { timeout: timeoutMs, maxBuffer: 4 << 20 });
      return stdout;
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      const why = (e.stderr || e.message).trim().split("\n").filter(Boolean).slice(-2).join(" | ");
      throw new Error(`runsc ${args[0]} failed: ${why}`);
    }
  }

  /**
   * `runsc run -detach`: creates and starts the sandbox and returns once it
   * runs. Its output goes to a file, never a pipe: the sandbox inherits
   * runsc's stdio and would hold a pipe open (gvisor-notes). With a network
   * of its own, runsc runs in a private mount namespace where /proc/sys/net is
   * hidden: runsc 20240729 tests /proc/sys/net/core/rmem_default to decide
   * whether it is in the host's network namespace, and on kernels >= 6 always
   * answers yes (and refuses); upstream fixed it, hiding it is harmless there.
   */
  async run(o: RunOptions, timeoutMs = 120_000): Promise<void> {
    await this.detached("run", ["-bundle", o.bundle], o, timeoutMs);
  }

  /**
   * `runsc restore -detach`: the sandbox again, from a checkpoint image, on
   * the same bundle (its rootfs, network namespace and limits), under this id.
   */
  async restore(o: RunOptions & { imagePath: string }, timeoutMs = 120_000): Promise<void> {
    // In the background: the sandbox runs as soon as its kernel state is back, and its memory is read in behind it
    // (the sentry holds the image's files open, so the caller may delete them once this returns).
    const background = (await runscFeatures(this.bin)).backgroundRestore ? ["-background"] : [];
    await this.detached("restore", ["-bundle", o.bundle, `-image-path=${o.imagePath}`, ...background], o, timeoutMs);
  }

  /** `run` and `restore`: started detached with its output in the log file, waited for until the sandbox runs. */
  private async detached(command: "run" | "restore", flags: string[], o: RunOptions, timeoutMs: number): Promise<void> {
    // runsc writes the sandbox's host pid there once it runs: startedPid() reads it instead of asking `runsc state`.
    this.pidFile = join(o.bundle, "sandbox.pid");
    rmSync(this.pidFile, { force: true });
    const args = [...this.globals(), "--host-uds=all", `--network=${o.network}`, "--overlay2=none", command, "-detach", `-pid-file=${this.pidFile}`, ...flags, this.id];
    const [file, argv] =
      o.network === "sandbox"
        ? [findExecutable("unshare") ?? "unshare", ["--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs -o ro,size=4k none /proc/sys/net && exec "$0" "$@"', this.bin, ...args]]
        : [this.bin, args];
    const fd = openSync(o.logFile, "a");
    try {
      const child = spawn(file, argv, { detached: true, stdio: ["ignore", fd, fd], cwd: o.bundle, env: { PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin" } });
      const code = await new Promise<number | string>((resolve) => {
        const timer = setTimeout(() => {
          child.kill("SIGKILL");
          resolve(`no answer within ${timeoutMs} ms`);
        }, timeoutMs);
        child.once("error", (err) => {
          clearTimeout(timer);
          resolve(err.message);
        });
        child.once("exit", (c, sig) => {
          clearTimeout(timer);
          resolve(c ?? `killed by ${sig}`);
        });
      });
      if (code !== 0) throw new Error(`runsc ${command} failed (${typeof code === "number" ? `exit ${code}` : code})`);
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Saves the sandbox's state (memory, kernel state) into `imagePath`,
   * uncompressed; it goes on running (`-leave-running`): the caller stops it
   * once the image is saved, so a failed checkpoint never loses a sandbox.
   */
  async checkpoint(imagePath: string): Promise<string> {
    const zeros = (await runscFeatures(this.bin)).skipZeroPages ? ["-exclude-committed-zero-pages"] : [];
    return this.cmd(["checkpoint", "-compression=none", ...zeros, `-image-path=${imagePath}`, "-leave-running", this.id], 600_000);
  }

  /** Writes `value` into a file inside the sandbox as root (gVisor's kernel only: its own cgroup files). */
  async writeInside(path: string, value: string): Promise<void> {
    await this.cmd(["exec", "-user", "0:0", this.id, "/bin/sh", "-c", 'echo "$1" > "$2"', "sh", value, path], 60_000);
  }

  /** A signal (a name such as URG: runsc sends 1-31 only) to the sandbox's init, PID 1 inside. */
  signal(name: string): Promise<string> {
    return this.cmd(["kill", this.id, name], 30_000);
  }

  /**
   * The host pid of the sandbox the last run or restore started, from the pid
   * file runsc wrote (a `runsc state` is a whole runsc process: about 40 ms of
   * a resume); else as `runsc state` says.
   */
  async startedPid(): Promise<RunscState | undefined> {
    try {
      const pid = this.pidFile ? Number(readFileSync(this.pidFile, "utf8").trim()) : 0;
      if (Number.isInteger(pid) && pid > 0) return { status: "running", pid };
    } catch {
      // not written: ask runsc
    }
    return this.state();
  }

  /** The sandbox's status and host pid, or undefined when runsc knows no such sandbox. */
  async state(): Promise<RunscState | undefined> {
    try {
      const s = JSON.parse(await this.cmd(["state", this.id], 30_000)) as Partial<RunscState>;
      return typeof s.pid === "number" && typeof s.status === "string" ? { status: s.status, pid: s.pid } : undefined;
    } catch {
      return undefined;
    }
  }

  pause(): Promise<string> {
    return this.cmd(["pause", this.id]);
  }

  resume(): Promise<string> {
    return this.cmd(["resume", this.id]);
  }

  /** Stops the sandbox (if it runs) and removes runsc's state and cgroups for it; what is gone is fine. */
  async destroy(): Promise<void> {
    await this.cmd(["delete", "-force", this.id]).catch(() => undefined);
  }
}
