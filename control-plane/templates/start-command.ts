// A template's start and ready commands, with E2B's semantics: the start
// command runs in the background (as the template's user, in its workdir,
// with its env), and the ready command is run again and again until it exits
// 0; then the sandbox is ready. A build checks them once on its new image; a
// create of the template runs them before it answers (where the runtime has
// no memory snapshot of the template already running them).
import { setTimeout as sleep } from "node:timers/promises";
import { Process } from "../../gen/ts/process/process_pb.js";
import type { SandboxBoot } from "../domain/template.js";
import type { EnvdRpc, EnvdTarget } from "../transport/envd-rpc.js";

/** E2B's ready check when a start command has none. */
export const DEFAULT_READY_CMD = "sleep 20";
/** How long a ready command may take to succeed. */
export const READY_TIMEOUT_MS = 10 * 60_000;
const TAIL = 20;

export class StartCommandError extends Error {}

interface Started {
  /** Resolves when the start command ends (it should not, for a server). */
  ended: Promise<{ exitCode: number; tail: string[] }>;
  /** Stops reading its output (it runs on). */
  detach(): void;
}

/** Starts `boot.startCmd` and returns once envd reports it started; its output goes to `onLine` until detached. */
async function startInBackground(rpc: EnvdRpc, target: EnvdTarget, boot: SandboxBoot, onLine?: (line: string) => void): Promise<Started> {
  const client = rpc.client(Process, target, boot.user);
  const ac = new AbortController();
  const tail: string[] = [];
  let started!: () => void;
  let failed!: (err: Error) => void;
  const startedP = new Promise<void>((resolve, reject) => ((started = resolve), (failed = reject)));
  const decoder = new TextDecoder();
  let partial = "";
  const ended = (async () => {
    let exitCode = -1;
    try {
      for await (const res of client.start(
        { process: { cmd: "/bin/sh", args: ["-c", boot.startCmd!], envs: boot.envs ?? {}, ...(boot.workdir ? { cwd: boot.workdir } : {}) }, stdin: false, tag: "start-cmd" },
        { signal: ac.signal },
      )) {
        const e = res.event?.event;
        if (e?.case === "start") started();
        else if (e?.case === "data" && (e.value.output.case === "stdout" || e.value.output.case === "stderr")) {
          const parts = (partial + decoder.decode(e.value.output.value, { stream: true })).split("\n");
          partial = parts.pop()!;
          for (const l of parts) {
            tail.push(l);
            if (tail.length > TAIL) tail.shift();
            onLine?.(l);
          }
        } else if (e?.case === "end") exitCode = e.value.exitCode;
      }
    } catch (err) {
      if (!ac.signal.aborted) failed(new StartCommandError(`the start command could not run: ${(err as Error).message}`));
    }
    started(); // an end with no start (it could not be spawned): `ended` says how
    return { exitCode, tail };
  })();
  await startedP;
  return { ended, detach: () => ac.abort() };
}

/** Runs the ready command until it exits 0; fails when the start command ends badly, the time is up, or `signal` fires. */
async function untilReady(rpc: EnvdRpc, target: EnvdTarget, boot: SandboxBoot, started: Started | undefined, o: { timeoutMs: number; signal?: AbortSignal }): Promise<void> {
  const ready = boot.readyCmd ?? DEFAULT_READY_CMD;
  const client = rpc.client(Process, target, boot.user);
  let startEnd: { exitCode: number; tail: string[] } | undefined;
  void started?.ended.then((e) => (startEnd = e));
  const deadline = Date.now() + o.timeoutMs;
  let delay = 20;
  let last = "";
  for (;;) {
    o.signal?.throwIfAborted();
    let code = -1;
    const out: string[] = [];
    for await (const res of client.start(
      { process: { cmd: "/bin/sh", args: ["-c", ready], envs: boot.envs ?? {}, ...(boot.workdir ? { cwd: boot.workdir } : {}) }, stdin: false },
      { timeoutMs: Math.max(1000, Math.min(60_000, deadline - Date.now())), signal: o.signal },
    )) {
      const e = res.event?.event;
      if (e?.case === "data") out.push(new TextDecoder().decode(e.value.output.value));
      else if (e?.case === "end") code = e.value.exitCode;
    }
    if (code === 0) return;
    last = out.join("").trim().split("\n").slice(-3).join(" | ");
    if (startEnd && startEnd.exitCode !== 0) {
      throw new StartCommandError(`the start command exited with ${startEnd.exitCode} before the ready command succeeded${startEnd.tail.length ? `: ${startEnd.tail.slice(-5).join(" | ")}` : ""}`);
    }
    if (Date.now() + delay > deadline) {
      throw new StartCommandError(`the ready command '${ready}' did not succeed within ${Math.round(o.timeoutMs / 1000)} s (last exit ${code}${last ? `: ${last}` : ""})`);
    }
    await sleep(delay, undefined, o.signal ? { signal: o.signal } : undefined);
    delay = Math.min(2_000, delay * 2);
  }
}

/** Starts a sandbox's start command and waits for its ready command (a create). No start command: nothing. */
export async function runStartCommand(rpc: EnvdRpc, target: EnvdTarget, boot: SandboxBoot | undefined, o: { timeoutMs?: number; onLine?: (line: string) => void; signal?: AbortSignal } = {}): Promise<void> {
  if (!boot?.startCmd && !boot?.readyCmd) return;
  const started = boot.startCmd ? await startInBackground(rpc, target, boot, o.onLine) : undefined;
  try {
    await untilReady(rpc, target, boot, started, { timeoutMs: o.timeoutMs ?? READY_TIMEOUT_MS, ...(o.signal ? { signal: o.signal } : {}) });
  } finally {
    started?.detach();
  }
}

/** The manager's hook: a new (or warm) sandbox's template start and ready commands. */
export function startCommandHook(rpc: EnvdRpc, timeoutMs = READY_TIMEOUT_MS): (target: EnvdTarget, boot: SandboxBoot | undefined) => Promise<void> {
  return (target, boot) => runStartCommand(rpc, target, boot, { timeoutMs });
}
