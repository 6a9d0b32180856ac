// Starting one sandbox: the template's own init binary in sandbox mode
// (`locale2b-init --sandbox`, rootfs/init/sandbox.c), run detached as real
// root. It reports the host pid of the sandbox's first process (pid 1 of its
// namespaces) on a pipe once the namespaces exist, or why it failed.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import type { Readable } from "node:stream";
import { tailLines } from "../../host/log-tail.js";

export interface LaunchSpec {
  /** The launcher: the template's /sbin/locale2b-init, as a host path. */
  initBinary: string;
  sandboxId: string;
  /** The overlay's lower layer: the template's rootfs with shifted owners. */
  rootfs: string;
  /** The writable layer's ext4 image. */
  disk: string;
  /** The sandbox's host directory (mount points; never visible inside). */
  stateDir: string;
  /** The hybrid-vsock socket the launcher creates for the host to dial. */
  socket: string;
  idBase: number;
  idCount: number;
  shmMB: number;
  cgroupProcs: string[];
  dns: string[];
  envdLogLevel: string;
  /** Where the sandbox's init and envd log (the launcher caps it). */
  logFile: string;
}

export interface Launched {
  /** The launcher's host pid: the sandbox lives as long as it does. */
  pid: number;
  /** Host pid of the sandbox's first process (its init): its namespaces are the sandbox's. */
  initPid: number;
  child: ChildProcess;
}

/** Whether a process's command line is the launcher of this sandbox (adoption checks it). */
export function isLauncherOf(args: string[], sandboxId: string): boolean {
  const i = args.indexOf("--id");
  return args[1] === "--sandbox" && i > 0 && args[i + 1] === sandboxId;
}

export function launcherArgs(s: LaunchSpec): string[] {
  const args = [
    "--sandbox",
    "--id",
    s.sandboxId,
    "--rootfs",
    s.rootfs,
    "--disk",
    s.disk,
    "--state",
    s.stateDir,
    "--socket",
    s.socket,
    "--id-map",
    `${s.idBase}:${s.idCount}`,
    "--shm-mb",
    String(s.shmMB),
    "--status-fd",
    "3",
    "--init-arg",
    "--envd-log",
    "--init-arg",
    s.envdLogLevel,
  ];
  for (const f of s.cgroupProcs) args.push("--cgroup-procs", f);
  for (const d of s.dns) args.push("--dns", d);
  return args;
}

function tail(file: string, n: number): string {
  return tailLines(file, n).join(" | ");
}

/** Starts the launcher and waits for its `pid N` (or `error …`) line. */
export async function launchSandbox(s: LaunchSpec, timeoutMs = 30_000): Promise<Launched> {
  const logFd = openSync(s.logFile, "a");
  let child: ChildProcess;
  try {
    child = spawn(s.initBinary, launcherArgs(s), {
      detached: true,
      stdio: ["ignore", logFd, logFd, "pipe"],
      cwd: "/",
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
    });
  } finally {
    closeSync(logFd);
  }
  child.unref();
  const status = child.stdio[3] as Readable;
  try {
    const line = await new Promise<string>((resolve, reject) => {
      let text = "";
      const timer = setTimeout(() => reject(new Error(`the sandbox launcher said nothing within ${timeoutMs} ms`)), timeoutMs);
      const done = (fn: () => void) => {
        clearTimeout(timer);
        status.removeAllListeners("data");
        fn();
      };
      status.setEncoding("utf8");
      status.on("data", (chunk: string) => {
        text += chunk;
        const nl = text.indexOf("\n");
        if (nl >= 0) done(() => resolve(text.slice(0, nl)));
      });
      status.once("end", () => done(() => reject(new Error("the sandbox launcher exited without a word"))));
      status.once("error", (err) => done(() => reject(err)));
      child.once("error", (err) => done(() => reject(new Error(`cannot run ${s.initBinary}: ${err.message}`))));
    });
    const m = /^pid (\d+)$/.exec(line);
    if (!m) throw new Error(line.startsWith("error ") ? line.slice(6) : `unexpected word from the sandbox launcher: ${line}`);
    if (!child.pid) throw new Error("the sandbox launcher has no pid");
    return { pid: child.pid, initPid: Number(m[1]), child };
  } catch (err) {
    child.kill("SIGKILL");
    const log = tail(s.logFile, 3);
    throw new Error(`cannot start the sandbox: ${(err as Error).message}${log ? ` (log: ${log})` : ""}`);
  } finally {
    status.destroy();
  }
}
