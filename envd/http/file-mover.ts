// What envd's two zero-copy paths share: the init binary's file movers
// (`locale2b-init --sendfile`, file-sendfile.ts; `locale2b-init --receive`,
// file-splice.ts), the plain socket they are given, and how one is run.
import { spawn } from "node:child_process";
import { Socket } from "node:net";
import { spawnHelper } from "../process/handler/spawn-helper.js";

/** The init binary when it can run envd's movers here (the spawn helper's binary, found usable), else undefined. */
export async function moverBinary(): Promise<string | undefined> {
  const binary = process.env.LOCALE2B_SPAWN_HELPER;
  return binary && (await spawnHelper()) ? binary : undefined;
}

/** The descriptor of a plain (TCP or Unix) socket that is still open; undefined for TLS, HTTP/2 streams or a closed one. */
export function plainSocketFd(socket: unknown): number | undefined {
  if (!(socket instanceof Socket) || "encrypted" in socket || socket.destroyed) return undefined;
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  return typeof fd === "number" && fd >= 0 ? fd : undefined;
}

export interface MoverEnd {
  /** The exit status, `killed by SIG…`, or undefined when it could not be started (nothing was moved). */
  status: number | string | undefined;
  /** The end of what it wrote on stderr. */
  stderr: string;
}

/**
 * Runs `binary args` with descriptors `stdin` and `stdout` (passed by number,
 * so Node keeps its own use of them) until it exits; killed if `killOnClose`
 * closes first (a mover must not outlive envd's side of a connection).
 */
export async function runMover(binary: string, args: string[], stdin: number, stdout: number, killOnClose?: Socket): Promise<MoverEnd> {
  const child = spawn(binary, args, { stdio: [stdin, stdout, "pipe"] });
  const kill = () => child.kill("SIGKILL");
  killOnClose?.once("close", kill);
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr = (stderr + c.toString()).slice(-500)));
  const status = await new Promise<number | string | undefined>((resolve) => {
    child.once("error", () => resolve(undefined));
    child.once("close", (code, signal) => resolve(code ?? `killed by ${signal}`));
  });
  killOnClose?.off("close", kill);
  return { status, stderr: stderr.trim() };
}

/** A mover's end that is neither success nor a known failure, for an error message. */
export function describeEnd({ status, stderr }: MoverEnd): string {
  return `${typeof status === "number" ? `exit ${status}` : status}${stderr ? `: ${stderr}` : ""}`;
}
