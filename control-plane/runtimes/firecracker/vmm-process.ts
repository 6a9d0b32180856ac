// Starting and stopping the Firecracker process (directly, or through the
// jailer). It is detached, in its own process group, with its output going to
// a file: it does not depend on the control plane and outlives its restart.
import type { ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import type { Logger } from "pino";
import { spawnDetached } from "../../host/detached.js";
import { accepts } from "../../host/unix-socket.js";
import { tailLines } from "../../host/log-tail.js";
import { isRunning, procStat, signalGroup, signalPids, waitFor } from "../process/procfs.js";
import type { JailSpec } from "./layout.js";

export interface Launch {
  file: string;
  args: string[];
  /** The VMM's environment (by default only PATH: the control plane's secrets stay out of it). */
  env?: NodeJS.ProcessEnv;
}

/** The environment a VMM gets unless the runtime is told otherwise. */
export function defaultVmmEnv(): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH || "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" };
}

/** `firecracker --api-sock <sock> --id <id>`. */
export function firecrackerLaunch(bin: string, apiSock: string, sandboxId: string): Launch {
  return { file: bin, args: ["--api-sock", apiSock, "--id", sandboxId] };
}

/**
 * `jailer --id <id> --exec-file <firecracker> --uid <uid> --gid <gid>
 * --chroot-base-dir <base> -- --api-sock <sock>`: the jailer sets up the
 * chroot (/dev/kvm, /dev/net/tun, cgroups), drops to uid/gid and execs
 * Firecracker in place (same pid), passing it `--id` itself.
 */
export function jailerLaunch(jailer: string, jail: JailSpec, apiSockInJail: string, sandboxId: string): Launch {
  return {
    file: jailer,
    args: [
      "--id",
      sandboxId,
      "--exec-file",
      jail.execFile,
      "--uid",
      String(jail.uid),
      "--gid",
      String(jail.gid),
      "--chroot-base-dir",
      jail.chrootBase,
      "--",
      "--api-sock",
      apiSockInJail,
    ],
  };
}

export interface VmmProcess {
  pid: number;
  startTime: number;
  /** Present for a process this control plane started: its exit is reported at once. */
  child?: ChildProcess;
}

/** Starts the VMM detached, stdout and stderr appended to `consolePath`. */
export function spawnVmm(launch: Launch, consolePath: string, cwd: string, log: Logger): VmmProcess {
  const child = spawnDetached(launch.file, launch.args, { logPath: consolePath, cwd, env: launch.env ?? defaultVmmEnv(), log });
  const pid = child.pid;
  if (!pid) throw new Error(`cannot start ${launch.file}`);
  const startTime = procStat(pid)?.startTime ?? 0;
  log.debug({ pid, file: launch.file, args: launch.args }, "firecracker started");
  return { pid, startTime, child };
}

function exitedError(what: string, consolePath: string): Error {
  const tail = tailLines(consolePath, 8);
  return new Error(`firecracker exited ${what}${tail.length ? `; its last output: ${tail.join(" | ")}` : " (no output)"}`);
}

/**
 * Waits until a Unix socket the VMM creates accepts connections (`connect`)
 * or at least exists; fails at once when the VMM dies, and after `timeoutMs`.
 */
export async function waitForSocket(
  path: string,
  vmm: VmmProcess,
  consolePath: string,
  what: string,
  timeoutMs = 5_000,
  connect = true,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let step = 2; ; step = Math.min(step * 2, 50)) {
    if (existsSync(path) && (!connect || (await accepts(path)))) return;
    if (!isRunning(vmm.pid, vmm.startTime)) throw exitedError(`before creating ${what} ${path}`, consolePath);
    if (Date.now() >= deadline) throw new Error(`firecracker did not create ${what} ${path} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, step));
  }
}

/** SIGKILLs the VMM (the process and its group) and waits until it is gone; true when it is. */
export async function stopVmm(pid: number, startTime: number): Promise<boolean> {
  if (!isRunning(pid, startTime)) return true;
  signalPids([pid], "SIGKILL");
  signalGroup(pid, "SIGKILL");
  return waitFor(() => !isRunning(pid, startTime), 5_000, 2);
}
