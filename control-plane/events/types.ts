/**
 * Events as every API shows them (the workspace API's SSE stream, the
 * Connect WatchSandboxEvents stream, the event log): what happened to a
 * sandbox, or in it, whichever API caused it.
 */
export const EVENT_TYPES = [
  "sandbox.created",
  "sandbox.paused",
  "sandbox.resumed",
  "sandbox.destroyed",
  "exec.started",
  "exec.completed",
  "exec.failed",
  "file.read",
  "file.written",
  "network.request",
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

export interface SandboxEvent {
  /** Position in the server's event log: increasing, never reused. */
  id: number;
  event_type: EventType;
  sandbox_id: string;
  /** ISO 8601. */
  timestamp: string;
  workspace_id?: string;
  /** The workspace API's background session (exec.*), when the process is one. */
  session_id?: string;
  /** The workspace API's blocking exec (its CommandResult's exec_id), when the process is one. */
  exec_id?: string;
  /** exec.*: the command (for a shell's `-c`, the script it ran), secrets redacted. */
  command?: string;
  pid?: number;
  cwd?: string;
  user?: string;
  /** exec.completed / exec.failed: -1 when killed by a signal. */
  exit_code?: number;
  duration_ms?: number;
  /** exec.failed: why (a timeout, a signal, a start that failed). */
  error?: string;
  /** file.*: the absolute path in the sandbox. */
  path?: string;
  bytes?: number;
  /** network.request: "tcp", "udp" or "icmp", and the address and port the sandbox dialed. */
  protocol?: string;
  destination?: string;
  port?: number;
  /** sandbox.created: the template. */
  template?: string;
  /** sandbox.destroyed / sandbox.paused: why (killed, timeout, died: …). */
  reason?: string;
}

/** An event before the log numbers it. */
export type NewEvent = Omit<SandboxEvent, "id" | "timestamp"> & { time?: number };
