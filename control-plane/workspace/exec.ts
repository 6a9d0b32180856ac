import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { Process, Signal } from "../../gen/ts/process/process_pb.js";
import { internalTag } from "../events/envd-activity.js";

export interface ExecRequest {
  /** Run through `/bin/bash -l -c`, as E2B's commands.run does. */
  command: string;
  cwd: string;
  env?: Record<string, string>;
  timeoutMs: number;
  /** Bytes of stdout and of stderr kept each; the rest is counted, not kept. */
  maxOutputBytes: number;
  tag: string;
  /** The sandbox it runs in (the kill on a timeout is tagged for it). */
  sandboxId: string;
}

export interface ExecOutcome {
  exitCode: number;
  stdout: string;
  stderr: string;
  durationMs: number;
  timedOut: boolean;
  /** The client went away: the command was killed. */
  aborted: boolean;
  truncated: boolean;
  /** envd's reason for a non-zero end (e.g. "signal: killed"). */
  endError?: string;
  pid: number;
}

/** Keeps the first `limit` bytes of a stream of chunks. */
class Capture {
  private readonly chunks: Uint8Array[] = [];
  private kept = 0;
  total = 0;

  constructor(private readonly limit: number) {}

  add(chunk: Uint8Array): void {
    this.total += chunk.length;
    if (this.kept >= this.limit) return;
    const part = chunk.length <= this.limit - this.kept ? chunk : chunk.subarray(0, this.limit - this.kept);
    this.chunks.push(part);
    this.kept += part.length;
  }

  get truncated(): boolean {
    return this.total > this.kept;
  }

  text(): string {
    return new TextDecoder().decode(Buffer.concat(this.chunks));
  }
}

/**
 * Kills the process group and the session of `$1` (envd starts each command
 * as the leader of a session and group of its own; a PTY shell's jobs get
 * groups of their own in the same session): every process whose session id
 * (field 6 of /proc/<pid>/stat) is it. POSIX sh, run in the sandbox.
 */
const KILL_TREE = `pid=$1
kill -9 -"$pid" 2>/dev/null
for d in /proc/[0-9]*; do
  s=$(cat "$d/stat" 2>/dev/null) || continue
  set -- \${s##*") "}
  [ "$4" = "$pid" ] && kill -9 "\${d#/proc/}" 2>/dev/null
done
true`;

/**
 * Kills a command and everything it started (its group and its session),
 * then the leader through envd, so that a command that left children
 * behind ends too, not only its shell.
 */
export async function killProcessTree(client: Client<typeof Process>, sandboxId: string, pid: number): Promise<void> {
  try {
    for await (const _ of client.start({
      process: { cmd: "/bin/sh", args: ["-c", KILL_TREE, "locale2b-kill", String(pid)] },
      tag: internalTag(sandboxId, `kill-${pid}`),
      stdin: false,
    })) {
      // drain
    }
  } catch {
    // the group may already be gone
  }
  await client.sendSignal({ process: { selector: { case: "pid", value: pid } }, signal: Signal.SIGKILL }).catch(() => undefined);
}

/**
 * A blocking exec on envd's process API: start, collect stdout and stderr
 * (up to maxOutputBytes each), end. On the timeout, or when `signal` aborts
 * (the HTTP client went away), the process tree is killed and the outcome
 * says so. envd also gets the timeout (plus a margin) as Connect-Timeout-Ms,
 * its process lifetime, in case the control plane is gone by then.
 */
export async function execBlocking(client: Client<typeof Process>, req: ExecRequest, signal: AbortSignal): Promise<ExecOutcome> {
  const stdout = new Capture(req.maxOutputBytes);
  const stderr = new Capture(req.maxOutputBytes);
  const started = performance.now();
  let pid = 0;
  let timedOut = false;
  let aborted = false;
  let end: { exitCode: number; error?: string } | undefined;
  let killing: Promise<void> | undefined;
  const kill = () => {
    if (!pid || killing) return;
    killing = killProcessTree(client, req.sandboxId, pid);
  };
  const timer = setTimeout(() => {
    timedOut = true;
    kill();
  }, req.timeoutMs);
  const onAbort = () => {
    aborted = true;
    kill();
  };
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    const stream = client.start(
      {
        process: { cmd: "/bin/bash", args: ["-l", "-c", req.command], envs: req.env ?? {}, cwd: req.cwd },
        tag: req.tag,
        stdin: false,
      },
      { timeoutMs: req.timeoutMs + 5_000 },
    );
    for await (const res of stream) {
      const e = res.event?.event;
      if (!e) continue;
      if (e.case === "start") {
        pid = e.value.pid;
        if (timedOut || aborted) kill();
      } else if (e.case === "data") {
        const o = e.value.output;
        if (o.case === "stdout") stdout.add(o.value);
        else if (o.case === "stderr" || o.case === "pty") stderr.add(o.value);
      } else if (e.case === "end") {
        end = { exitCode: e.value.exitCode, ...(e.value.error ? { error: e.value.error } : {}) };
      }
    }
  } catch (err) {
    const ce = ConnectError.from(err);
    // The deadline reached envd before our kill did: the outcome is still a timeout.
    if (!(ce.code === Code.DeadlineExceeded && (timedOut || end))) throw ce;
    timedOut = true;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener("abort", onAbort);
    await killing;
  }
  return {
    exitCode: end?.exitCode ?? -1,
    stdout: stdout.text(),
    stderr: stderr.text(),
    durationMs: Math.round(performance.now() - started),
    timedOut,
    aborted,
    truncated: stdout.truncated || stderr.truncated,
    ...(end?.error ? { endError: end.error } : {}),
    pid,
  };
}
